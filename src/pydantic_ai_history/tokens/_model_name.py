"""Model names as pydantic-ai and the providers write them, parsed: who serves the model and what model it is.

A name carries up to four things: the pydantic-ai provider (`bedrock:`, `openrouter:`, `ollama:`), a vendor or
region prefix (`us.anthropic.`, `meta-llama/`, `publishers/google/models/`), the model, and a version or tag
(Bedrock's `-v2:0`, Ollama's `:8b`, Vertex's `@20241022`, OpenRouter's `:free`). Only the first colon after a
known provider separates the provider: `bedrock:us.anthropic.claude-3-5-sonnet-20241022-v2:0` is Claude 3.5
Sonnet on Bedrock, not a model called `0`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

ModelFamily = Literal[
    'openai',
    'anthropic',
    'google',
    'meta',
    'mistral',
    'deepseek',
    'amazon',
    'cohere',
    'xai',
    'qwen',
    'microsoft',
]
"""Who made the model (not who serves it): decides the token profile and which table entries apply."""

KNOWN_PROVIDERS: frozenset[str] = frozenset(
    {
        # pydantic-ai's provider names (`infer_provider`, 1.0 to 2.68) and model `system` values
        *('openai', 'openai-chat', 'openai-responses', 'openai-chatgpt', 'openai-codex', 'openai-decisions'),
        *('azure', 'azure-responses', 'anthropic', 'bedrock', 'bedrock-mantle', 'cohere', 'deepseek'),
        *('google', 'google-gla', 'google-vertex', 'google-cloud', 'google-decisions', 'vertexai', 'gemini'),
        *('mistral', 'groq', 'grok', 'xai', 'cerebras', 'fireworks', 'together', 'openrouter', 'ollama'),
        *('litellm', 'vllm'),
        *('huggingface', 'heroku', 'github', 'github-copilot', 'moonshotai', 'nebius', 'ovhcloud', 'vercel'),
        *('alibaba', 'sambanova', 'crusoe', 'meta', 'zai', 'snowflake', 'typesafe', 'system-one', 'outlines'),
    }
)
"""Names that, before the first colon, are certainly a provider: `model_name_of` keeps such a prefix where a
`Model` named itself with one (a `FunctionModel` standing in for `anthropic:claude-...`)."""

_PROVIDER_FAMILY: dict[str, ModelFamily] = {
    # Azure OpenAI deployments carry names of the user's choosing
    **dict.fromkeys(
        ('openai', 'openai-chat', 'openai-responses', 'openai-chatgpt', 'openai-codex'), 'openai'
    ),
    **dict.fromkeys(('azure', 'azure-responses'), 'openai'),
    **dict.fromkeys(
        ('google', 'google-gla', 'google-vertex', 'google-cloud', 'vertexai', 'gemini'), 'google'
    ),
    **dict.fromkeys(('grok', 'xai'), 'xai'),
    **{family: family for family in ('anthropic', 'mistral', 'deepseek', 'cohere', 'meta')},
}
"""The family a provider implies when the model's own name does not say (a Vertex Claude says it does)."""

_VENDOR_FAMILY: dict[str, ModelFamily] = {
    **{
        f: f
        for f in ('openai', 'anthropic', 'google', 'meta', 'mistral', 'deepseek', 'amazon', 'cohere', 'xai')
    },
    **{'qwen': 'qwen', 'microsoft': 'microsoft'},
    **{'meta-llama': 'meta', 'mistralai': 'mistral', 'deepseek-ai': 'deepseek', 'x-ai': 'xai'},
}
"""Vendor prefixes: `anthropic/` on OpenRouter, `anthropic.` on Bedrock, `publishers/anthropic/` on Vertex."""

_FAMILY_PREFIXES: tuple[tuple[str, ModelFamily], ...] = (
    (r'claude', 'anthropic'),
    (r'gpt|o\d|chatgpt|codex|text-embedding|davinci|babbage', 'openai'),
    (r'gemini|gemma|learnlm', 'google'),
    (r'llama|codellama|meta-llama', 'meta'),
    (r'mistral|mixtral|codestral|pixtral|ministral|magistral|devstral|voxtral|open-mi', 'mistral'),
    (r'deepseek', 'deepseek'),
    (r'nova-|titan-', 'amazon'),
    (r'command|c4ai', 'cohere'),
    (r'grok', 'xai'),
    (r'qwen|qwq', 'qwen'),
    (r'phi-', 'microsoft'),
)
_FAMILY_AT_START = re.compile('|'.join(f'(?P<f{i}>{p})' for i, (p, _) in enumerate(_FAMILY_PREFIXES)))
_FAMILY_ANYWHERE = re.compile(r'claude|gemini|gemma|llama|mistral|mixtral|deepseek|qwen')
"""Distinctive names found inside a longer one (`my-finetuned-llama-3`, `deepseek-r1-distill-llama-70b`:
the first one found wins); each is the start of its family's `_FAMILY_PREFIXES` entry."""

_TAG = re.compile(
    r'^(?:latest|free|beta|nitro|floor|online|extended|thinking|exacto|\d[\w.+-]*|q\d[\w.-]*|fp16|bf16|f16)$',
    re.IGNORECASE,
)
"""What follows a model's last colon when it is not a model: an Ollama tag (`8b`, `7b-instruct-q4_K_M`,
`latest`, `Q4_K_M`), a Bedrock version (`0`) or an OpenRouter variant (`free`, `beta`)."""
_BEDROCK_ID = re.compile(
    r'^(?:(?:us|eu|apac|global|us-gov|jp|au|ca|in|regional)\.)?'
    r'(?P<vendor>anthropic|meta|mistral|amazon|cohere|ai21|deepseek|openai|qwen|google|writer|nvidia|moonshotai|'
    r'zai|minimax|twelvelabs|stability)\.(?P<model>.+)$'
)
"""A Bedrock model id or inference profile: `[region.]vendor.model-vN[:M]`."""
_BEDROCK_VERSION = re.compile(r'-v\d+$')
_LLAMA_VERSION = re.compile(r'^(?:meta-)?llama-?v?(?P<major>\d+)(?:[.p-](?P<minor>\d)(?![\db]))?')
"""Llama versions as providers spell them (`llama3.1`, `llama3-1-70b`, `llama-v3p1`, `Meta-Llama-3.1`), read
as `llama-3.1` so one table entry serves all; `llama3-70b` and `llama-3-8b` are version 3 (the digit after
the dash is a size)."""
_CLAUDE_DOTTED_VERSION = re.compile(r'(?<=\d)\.(?=\d)')


@dataclass(frozen=True, kw_only=True)
class ModelName:
    """A model name taken apart (see `parse_model_name`)."""

    name: str
    """The name as given."""
    provider: str | None
    """The pydantic-ai provider before the first colon (`bedrock`, `openrouter`, `ollama`), lower case; None
    for a bare model name such as `gpt-4o` or `llama3.1:8b`."""
    model_id: str
    """What the provider calls the model: the name without the provider (`us.anthropic.claude-...-v2:0`)."""
    vendor: str | None
    """The vendor or publisher prefix of the id, when it has one: `anthropic` in
    `anthropic/claude-3.5-sonnet`, `us.anthropic.claude-...` and `publishers/anthropic/models/claude-...`."""
    ref: str
    """The bare model, lower case, without provider, vendor, region, version suffix or tag: what the built-in
    tables are matched against (`claude-3-5-sonnet-20241022`, `llama-3.1-70b-instruct`, `gemini-2.5-pro`)."""
    family: ModelFamily | None
    """Who made the model, from the vendor prefix, the model's name, then the provider; None when nothing
    says (a custom deployment on a provider that serves many families)."""
    tag: str | None = None
    """The tag or version after the model's last colon (`8b`, `0`, `free`) or `@` (`20241022`)."""


def parse_model_name(name: str) -> ModelName:
    """Take a model name apart; pure and total (any string parses, unknown parts come back as None)."""
    provider, model_id = _split_provider(name.strip())
    rest, tag = _split_tag(model_id)
    vendor, model, bedrock = _split_vendor(rest)
    ref = _BEDROCK_VERSION.sub('', model.lower()) if bedrock else model.lower()
    family = _VENDOR_FAMILY.get(vendor or '') or family_of(ref) or _PROVIDER_FAMILY.get(provider or '')
    if family == 'meta':
        ref = _LLAMA_VERSION.sub(_llama_version, ref, count=1)
    elif family == 'anthropic':
        ref = _CLAUDE_DOTTED_VERSION.sub('-', ref)  # OpenRouter's claude-3.5-sonnet is claude-3-5-sonnet
    return ModelName(
        name=name, provider=provider, model_id=model_id, vendor=vendor, ref=ref, family=family, tag=tag
    )


def family_of(ref: str) -> ModelFamily | None:
    """The family a bare model name belongs to (`claude-...` is Anthropic's), or None."""
    ref = ref.lower()
    match = _FAMILY_AT_START.match(ref)
    if match is not None and match.lastgroup is not None:
        return _FAMILY_PREFIXES[int(match.lastgroup[1:])][1]
    found = _FAMILY_ANYWHERE.search(ref)
    return family_of(found.group()) if found else None


def _split_provider(name: str) -> tuple[str | None, str]:
    head, colon, rest = name.partition(':')
    if not colon:
        return None, name
    if _TAG.match(rest) or ('/' in head and not head.startswith('gateway/')):
        return None, name  # `llama3.1:8b`, `mistral:7b`, `hf.co/org/model:tag`: a model and its tag
    # a known provider, or an unknown prefix before a model name: a custom provider (`my-vllm:`, `function:`)
    return head.lower(), rest


def _split_tag(model_id: str) -> tuple[str, str | None]:
    rest, at, version = model_id.partition('@')  # Vertex: claude-3-5-sonnet-v2@20241022
    if at:
        return rest, version
    head, colon, tail = model_id.rpartition(':')
    if colon and head and _TAG.match(tail):
        return head, tail
    return model_id, None


def _split_vendor(model_id: str) -> tuple[str | None, str, bool]:
    """The vendor prefix, the model, and whether the id is a Bedrock one (whose `-vN` is a version)."""
    bedrock = _BEDROCK_ID.match(model_id)
    if bedrock is not None:
        return bedrock['vendor'], bedrock['model'], True
    parts = [p for p in model_id.split('/') if p]
    if len(parts) < 2:
        return None, model_id, False
    if 'publishers' in parts[:-1]:  # Vertex: projects/p/locations/l/publishers/anthropic/models/claude-...
        return parts[parts.index('publishers') + 1].lower(), parts[-1], False
    # OpenRouter, Together, Hugging Face: vendor/model; Fireworks: accounts/fireworks/models/model
    vendor = parts[-2].lower()
    return (vendor if vendor != 'models' else None), parts[-1], False


def _llama_version(match: re.Match[str]) -> str:
    minor = match['minor']
    return f'llama-{match["major"]}.{minor}' if minor else f'llama-{match["major"]}'
