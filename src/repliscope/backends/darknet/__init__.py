"""The Darknet backend: libdarknet (Debian's package) through ctypes, the native runtime of darknet sources."""

from repliscope.backends import Backend, RuntimeEntry

BACKEND = Backend(
    "darknet",
    runtimes=(
        RuntimeEntry(
            "darknet",
            "repliscope.runtimes.darknet.runner:DarknetRunner",
            source_formats=("darknet",),
            system_library="Debian package 'darknet' (libdarknet.so through ctypes)",
            instrument="repliscope.tracing.instruments:darknet_instrument",
        ),
    ),
    frameworks={"darknet": "darknet"},
)
