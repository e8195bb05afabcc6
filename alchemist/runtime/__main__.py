import sys

from alchemist.runtime.worker import main

sys.exit(main(sys.argv[1:]))
