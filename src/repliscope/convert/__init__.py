"""Weight conversion between frameworks by a declarative mapping (torch -> Keras 3 for now).

``mapping`` is framework-free; ``keras_target`` imports Keras (TensorFlow backend) only when used.
"""

from repliscope.convert.keras_target import ConversionError, ConversionReport, convert_state_dict, load_port
from repliscope.convert.mapping import KINDS, LayerMapping, MappingError, load_mapping

__all__ = [
    "KINDS",
    "ConversionError",
    "ConversionReport",
    "LayerMapping",
    "MappingError",
    "convert_state_dict",
    "load_mapping",
    "load_port",
]
