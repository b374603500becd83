"""classroom: the five exercises as gradable assignments (see classroom/TEACHERS.md)."""
