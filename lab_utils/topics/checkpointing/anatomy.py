from lab_utils.stepmem import *  # noqa: F403 -- moved to lab_utils.stepmem (labs 1 and 8 share it); removed at merge
