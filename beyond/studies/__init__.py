"""beyond/studies/: measurements past the lesson's exercises, each `python -m beyond.studies.NAME`."""
