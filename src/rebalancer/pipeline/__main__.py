"""`python -m rebalancer.pipeline run ...`, and the file to hand to spark-submit.

    spark-submit --master spark://host:7077 "$(python -c 'import rebalancer.pipeline.__main__ as m; print(m.__file__)')" run --input ...
"""

from __future__ import annotations

import sys

from rebalancer._command import main

if __name__ == "__main__":
    sys.exit(main(["pipeline", *sys.argv[1:]]))
