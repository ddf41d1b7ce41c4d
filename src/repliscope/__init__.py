"""repliscope: check a shared ML model's claims and find why a re-implementation differs.

Data flows one way: manifest -> pipeline -> runtime -> evaluation record -> store / report.
Importing the package needs no ML framework; frameworks are imported lazily by the plugins that use them.
"""

__version__ = "0.1.0"
