"""Importers: translate model configs of other tools (MLModelScope manifests, timm pretrained configs) into
repliscope manifests. One registry, :data:`repliscope.importers.base.IMPORTERS`, keyed by the word the CLI uses
(``repliscope manifest import NAME FILE``)."""
