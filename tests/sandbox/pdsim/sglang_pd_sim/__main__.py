import sys

from sglang_pd_sim.app import main

sys.exit(main())
