"""Generators of the studies the labs load (each stored beside its lab's package, with its settings
and loader there): ``python -m tools.studies.<name> --out FILE``. Instructors' tools: they run for
minutes on real ranks, and nothing in lab_utils imports them."""
