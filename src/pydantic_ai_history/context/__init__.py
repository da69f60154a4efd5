"""What a stage works with, below the stages and the pipeline that runs them: the request's context
(`HistoryContext`), the interface a stage implements (`HistoryStage`), the side effects it asks for
(`StageOperations`, run in place by `InlineOperations`), what belongs off the event loop, and the settings
and models the pipeline reads for the stages (`SummarizerSettings`, `ArtifactSettings`, `ArtifactPlan`).
The public names are exported where they always were (`pydantic_ai_history`, `pipeline`, `stages.artifacts`).
"""
