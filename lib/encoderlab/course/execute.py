"""Execute lesson notebooks one at a time, on a quiet machine, and record how (``make notebooks``).

    python -m encoderlab execute lessons/03-bidirectional-self-attention.ipynb ...

Stored outputs are the published text, and their progress bars and timings are only true
if nothing else ran. So before each notebook this waits (up to ``--wait`` seconds) for the
1-minute load average to fall to the number of cores, then records that load, the core
count and the execution time in the notebook's metadata (``encoderlab_execution``); a test
fails for a notebook executed under load or taking a minute or more. Streams are coalesced
and per-cell timestamps dropped, so a diff shows only real changes.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

__all__ = ["wait_until_idle", "execute_notebook", "main"]


def wait_until_idle(max_wait: float = 300.0, poll: float = 10.0) -> float:
    """The 1-minute load average once it is at most the number of cores, or after ``max_wait``
    seconds (whatever it is then)."""
    cpus = os.cpu_count() or 1
    waited = 0.0
    load = os.getloadavg()[0]
    while load > cpus and waited < max_wait:
        print(f"  load average {load:.2f} on {cpus} cores: waiting for a quiet machine",
              flush=True)
        time.sleep(poll)
        waited += poll
        load = os.getloadavg()[0]
    return load


def execute_notebook(path, timeout: int = 600, max_wait: float = 300.0) -> dict:
    """Execute the notebook at ``path`` in place; return the record stored in its metadata."""
    import nbformat
    from nbconvert.preprocessors import CoalesceStreamsPreprocessor, ExecutePreprocessor

    path = pathlib.Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"expected the path of a notebook (.ipynb), got {str(path)!r}.")
    load = wait_until_idle(max_wait)
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    ExecutePreprocessor(timeout=timeout, kernel_name="python3").preprocess(
        nb, {"metadata": {"path": str(path.parent)}}
    )
    seconds = time.perf_counter() - start
    CoalesceStreamsPreprocessor().preprocess(nb, {})
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # per-cell timestamps
    record = {"load_average_1m": round(load, 2), "cpus": os.cpu_count() or 1,
              "seconds": round(seconds, 1)}
    nb.metadata["encoderlab_execution"] = record
    nbformat.write(nb, path)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m encoderlab execute", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="+", help="notebooks to execute in place, in order")
    parser.add_argument("--wait", type=float, default=300.0,
                        help="seconds to wait for a quiet machine before each (default 300)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        print(f"{path}:", flush=True)
        try:
            record = execute_notebook(path, timeout=args.timeout, max_wait=args.wait)
        except ValueError as error:
            print(f"  {error}", file=sys.stderr)
            return 2
        busy = " (UNDER LOAD: execute it again on a quiet machine)" \
            if record["load_average_1m"] > record["cpus"] else ""
        print(f"  {record['seconds']} s; load average before: {record['load_average_1m']} "
              f"on {record['cpus']} cores{busy}", flush=True)
    return 0
