"""Stand-in for pip's get-pip.py bootstrap script, for ansible-test on machines that cannot fetch it.

ansible-test creates each sanity test's virtual environment without pip and then runs a downloaded
get-pip.py in it (its own URL, not the package index). This does the same from what Python ships:
`ensurepip` puts the bundled pip in, then that pip installs the pinned versions ansible-test asks for
from the package index configured for pip on this machine. scripts/sanity.sh puts it where ansible-test
looks for a cached copy (~/.ansible/test/cache/get_pip_<version>.py).
"""

import subprocess
import sys

# get-pip.py takes pip install's arguments plus two switches of its own that plain pip does not know.
OWN_SWITCHES = {"--no-setuptools", "--no-wheel"}


def main() -> int:
    args = [arg for arg in sys.argv[1:] if arg not in OWN_SWITCHES]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
    return subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", *args])


if __name__ == "__main__":
    sys.exit(main())
