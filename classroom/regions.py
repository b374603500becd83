"""
classroom/regions.py: solution regions, and the student version made from them. A solution lives
once, in the reference code, between `# BEGIN SOLUTION` and `# END SOLUTION` comment lines; the
student version keeps everything else and replaces each region by `raise
NotImplementedError("Exercise N: ...")` at its indentation. Only the graded files hold regions
(parts.STUDENT_FILES); what would answer a part elsewhere is left out whole
(project.TEACHERS_ONLY).
"""

import re

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")


class RegionError(ValueError):
    """Markers that do not pair up, or a region outside any function."""


def regions(text, begin=BEGIN, end=END):
    """[(first line, last line, indentation, enclosing function)] of every region, 0-based,
    the marker lines included."""
    found, open_at, function_at = [], None, []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        match = _DEF.match(line)
        if match:
            function_at.append((len(line) - len(line.lstrip()), match.group(1)))
        if stripped == begin:
            if open_at is not None:
                raise RegionError(f"line {i + 1}: {begin} inside another region")
            open_at = i
        elif stripped == end:
            if open_at is None:
                raise RegionError(f"line {i + 1}: {end} without {begin}")
            indent = lines[open_at][:len(lines[open_at]) - len(lines[open_at].lstrip())]
            enclosing = [name for depth, name in function_at if depth < len(indent)]
            found.append((open_at, i, indent, enclosing[-1] if enclosing else None))
            open_at = None
    if open_at is not None:
        raise RegionError(f"line {open_at + 1}: {begin} is never closed")
    return found


def student_version(text, message_for):
    """The text with every solution region replaced by a NotImplementedError.

    message_for(function) -> the message for the region inside `function`."""
    lines = text.splitlines(keepends=True)
    for first, last, indent, function in reversed(regions(text)):
        if function is None:
            raise RegionError(f"line {first + 1}: a solution region must be inside a function")
        lines[first:last + 1] = [f"{indent}raise NotImplementedError({message_for(function)!r})\n"]
    return "".join(lines)


def without_markers(text):
    """The text without its solution marker lines (a solved cell pasted into a student's)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if line.strip() not in (BEGIN, END))


def functions_with_solutions(text):
    return [function for _, _, _, function in regions(text)]
