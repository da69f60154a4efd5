"""What the summarizer is told: fixed sections, the original task, the previous summary, the transcript."""

from __future__ import annotations

__all__ = ('DEFAULT_INSTRUCTIONS', 'SECTIONS', 'build_prompt')

SECTIONS = (
    'Goal and constraints',
    'Decisions',
    'Artifacts and files',
    'Errors and resolutions',
    'Current state',
    'Next steps',
    'Open questions',
)
"""The summary's fixed sections, in order."""

DEFAULT_INSTRUCTIONS = (
    'You maintain the working summary of a long conversation between a user and an AI agent that uses tools. '
    'The summary replaces the older messages: the agent continues from it, so keep every fact it still needs '
    '(names, ids, numbers, paths, commands, decisions, errors and how they were fixed) and drop chatter. '
    'When a previous summary is given, update it with the new messages: keep its facts unless the new '
    'messages supersede them. Write markdown with exactly these sections, in this order:\n'
    + '\n'.join(f'## {s}' for s in SECTIONS)
    + "\nUnder 'Goal and constraints' quote the user's goal and constraints in their own words. Write 'none' "
    'under a section with nothing to say. Answer with the summary only: do not address the user and do not '
    'continue the conversation.'
)


def build_prompt(
    *,
    transcript: str,
    original_task: str | None,
    previous_summary: str | None,
    focus: str | None,
    max_tokens: int,
    part: int = 1,
    parts: int = 1,
) -> str:
    """The user prompt of one summarizer call (one chunk of the transcript when it is split)."""
    sections = [
        f'<original_task>\n{original_task or "(not available)"}\n</original_task>',
        f'<previous_summary>\n{previous_summary or "(none: this is the first summary)"}\n</previous_summary>',
    ]
    if focus:
        sections.append(f'<focus>\nGive the most room to: {focus}\n</focus>')
    which = f' part="{part} of {parts}"' if parts > 1 else ''
    sections.append(f'<messages{which}>\n{transcript}\n</messages>')
    more = ' More messages follow in the next part.' if part < parts else ''
    sections.append(
        f'Write the updated summary of everything above.{more} Stay under {max_tokens} tokens '
        f'(about {int(max_tokens * 0.7)} words).'
    )
    return '\n\n'.join(sections)
