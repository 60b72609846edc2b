"""Instructor tools that work on the labs themselves, and lab 3's root-only real-link validation
(``validate_link``); none is imported by lab_utils or its ranks."""
