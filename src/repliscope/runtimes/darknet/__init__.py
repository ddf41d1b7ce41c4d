"""The ``darknet`` runtime: the ORIGINAL C implementation (Debian's ``libdarknet.so``, pjreddie 2018) through
ctypes. ``lib``: the library and the structs it exchanges; ``runner``: :class:`DarknetRunner` (every layer's
output by its Darknet name); ``reference``: Darknet's own letterbox and detections, for pinning the ops."""
