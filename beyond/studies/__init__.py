"""beyond/studies/: measurements past the lesson's exercises, each run as
`python -m beyond.studies.NAME`, all of them by `python -m beyond.studies` (make studies)."""
