"""Lab 3's real-link validation: root-only apparatus outside the package students import.

    sudo make validate-link     # a few minutes; rewrites lab_utils/labs/lab03_ddp/real_link.json

``run`` builds two network namespaces joined by a veth pair (``netns``), shapes each end with tc
tbf, starts one gloo rank in each (``rank``, with ``ip netns exec``) and compares the stamped
updates with lab 3's overlap model. The lab shows the stored result through
``lab_utils.labs.lab03_ddp.reallink`` (its dataclasses, ``load`` and ``table``). This package may
import ``lab_utils``; ``lab_utils`` never imports it. It is not installed: run it from the
repository root (``python -m tools.validate_link.run``), and the ranks get that root on their path.
"""
