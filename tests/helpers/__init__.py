"""Helpers the tests import (never from a conftest)."""
