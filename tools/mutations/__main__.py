import sys

from tools.mutations import main

sys.exit(main())
