"""Entry point of one rank started by ``lab_utils.launch`` (not meant to be run by hand)."""
import sys

from lab_utils.launch import _worker

if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
