"""``prism <verb> [PATH ...] [key=value ...]``: the command line's entry point.

:func:`main` reads the words with the one grammar of :mod:`predictor.app.grammar`, calls
the verb (:mod:`predictor.app.verbs`: each declared once, in :mod:`~predictor.app.training`,
:mod:`~predictor.app.predicting`, :mod:`~predictor.app.measuring` and
:mod:`~predictor.app.store`), which reads its settings node (:mod:`predictor.app.settings`)
and prints its result as a table or JSON (:mod:`predictor.app.output`). Bad input ends with
one line naming the field and the fix, and exit code 2; Ctrl-C or SIGTERM with 130; a full
disk with one line saying so. Verbs that measure import the torch-based :mod:`sampling`
package only when they run, so ``predictor`` itself never imports torch.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import sys

from predictor.app.grammar import Command, flags_first, read
from predictor.app.output import refused
from predictor.app.output import show as _print  # noqa: F401  (tests' name for it)
from predictor.app.predicting import _sample_this_machine, split_hardware  # noqa: F401  (tests call them)
from predictor.app.verbs import build_parser, verbs
from predictor.core.errors import PrismError

__all__ = ["VERBS", "main", "split_hardware"]

#: Every verb, by name (:mod:`predictor.app.verbs`).
VERBS = verbs()

#: A write that failed for want of room, not for a bad path: the disk or quota full, the file
#: system read-only (an output folder is checked for writing before any work; these arrive later).
FULL_DISK = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
#: The settings that name where a verb writes.
WRITES_TO = ("out", "models_dir", "output_dir", "plot", "measure.trace_dir")


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (a scheduler's kill) stops as cleanly as Ctrl-C


def _plain_text_terminal() -> None:
    """Where stdout or stderr cannot encode the reports' µ, · and – (a non-UTF-8 locale with
    Python's UTF-8 mode off), such characters print as ? rather than failing the verb."""
    for stream in (sys.stdout, sys.stderr):
        try:
            "µ·–".encode(stream.encoding or "utf-8")
        except (UnicodeEncodeError, LookupError):
            if hasattr(stream, "reconfigure"):
                stream.reconfigure(errors="replace")


def _run(args) -> int:
    """Read ``args`` (argparse's: the verb, its words and flags) as a command and run its verb."""
    verb = VERBS[args.verb]
    command, wrong = read(args.verb, args.words, verb.paths, json=args.json,
                          show_config=getattr(args, "show_config", False))
    args.command = command
    if wrong:
        args.parser.error(wrong)  # as argparse says a missing or extra path: usage, then the line; exit 2
    return verb.run(command)


def main(argv=None) -> int:
    # PRISM's arrays are small: the BLAS thread pools numpy and scipy start (OpenBLAS, a
    # thread per core each) only cost start-up and shutdown, 0.1 s of a 0.6 s prism predict
    # on 2 busy cores. Set before numpy loads; a user's own setting stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = build_parser().parse_args(flags_first(sys.argv[1:] if argv is None else list(argv)))
    args.command = Command(args.verb, json=args.json)
    _plain_text_terminal()
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    except PrismError as exc:
        return refused(args.verb, exc, args.command.wants_json)
    except BrokenPipeError:  # the reader left (prism ... | head): nothing more to say (an OSError too: caught first)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush stays quiet
        return 128 + signal.SIGPIPE
    except OSError as exc:
        if exc.errno not in FULL_DISK:
            raise
        given = [o for o in args.command.settings if o.partition("=")[0] in WRITES_TO]
        where = exc.filename or " or ".join(given) or "the output"
        return refused(args.verb, PrismError(f"{where}: {exc.strerror or os.strerror(exc.errno)} while writing; free "
                                             f"space there or write elsewhere, and run again (files are replaced "
                                             f"whole, so what was stored before is as it was)", field=exc.filename),
                       args.command.wants_json)
    except KeyboardInterrupt:
        print(f"prism {args.verb}: interrupted", file=sys.stderr)
        if args.command.wants_json:
            print(json.dumps({"error": "interrupted", "field": None}))
        return 130
    finally:
        # the verb is over (its files saved): a SIGTERM while the interpreter shuts down and joins
        # joblib's worker threads (prism train) is no interrupt to raise, which would print a traceback
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
