"""Tools for instructors and developers, never imported by lab_utils or its ranks: the exercise
solutions (``solutions``), the mutation check (``mutations``), lab 3's root-only real-link
validation (``validate_link``) and the generators of stored studies (``studies``)."""
