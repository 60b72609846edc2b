"""Instructor tools that work on the labs themselves (not imported by lab_utils or its ranks)."""
