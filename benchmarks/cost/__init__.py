"""The cost benchmark of issue 27 (driver: benchmarks/bench_cost.py; method: benchmarks/README.md, "Cost").

A 180-step tool loop of a real `Agent` against a strict provider that counts every request with o200k and
bills it the way providers with prompt caching do, for every contender side by side. Modules:

- `pricing`: the two cache models (automatic prefix, breakpoints) and the prices: pure functions;
- `provider`: the ruler, a `FunctionModel` function that renders requests into blocks, rejects, records;
- `workload`: the tool outputs (real fixtures, seeded sizes) and the 30 facts planted in them;
- `coding`: the second workload (issue 37), a coding loop: source files read and re-read, real agent outputs;
- `summarizer`: the scripted summarizer every contender calls;
- `facts`: which facts the final context holds, or one read-back finds;
- `contenders`: each setup, configured as its README says;
- `run`: one contender at one window, to a JSON-able result; `report`: the tables and issue 37's rule.
"""
