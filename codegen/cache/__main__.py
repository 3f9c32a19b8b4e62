"""``python -m codegen.cache [info|clear|prune]``: see codegen.cache.

(Here rather than in the package: `clear` needs codegen.build, which imports the package.)
"""
import sys

from codegen import build, cache


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else "info"
    if command not in ("info", "clear", "prune") or len(argv) > 1:
        print("usage: python -m codegen.cache [info|clear|prune]", file=sys.stderr)
        return 2
    try:
        directory = cache.checked_dir()
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if command == "clear":
        build.clear_cache()
        print(f"cleared {directory}")
        return 0
    if command == "prune":
        n = cache.prune(directory)
        n_temp = cache.remove_stale_temps(directory)
        print(f"pruned {n} kernels and {n_temp} stale temporary files from {directory}")
    d = cache.info(directory)
    print(f"directory: {d['directory']}\n"
          f"size: {d['bytes']} bytes (limit {d['max_bytes']}, {cache.MAX_BYTES_ENV})\n"
          f"kernels: {d['kernels']}\n"
          f"hits: {d['hits']}\n"
          f"compiles: {d['compiles']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
