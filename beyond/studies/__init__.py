"""beyond/studies/: measurements past the lesson's exercises, each run as
`python -m beyond.studies.NAME`."""
