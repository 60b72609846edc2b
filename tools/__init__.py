"""Instructor tools that work on the labs themselves (not imported by lab_utils; only a study
generator's own ranks import its module)."""
