"""studies/: measurements past the lesson's exercises, each run as
`python -m studies.NAME`, all of them by `python -m studies` (make studies)."""
