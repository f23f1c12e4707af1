"""crossmod: multimodal, multilingual, multicultural hate-speech detection in memes (Lightning + Hydra), one label head
per annotator culture. Packages, each importing only those listed before it (tests/test_import_direction.py): `data`
(sources, shards, streaming), `evaluation` (every score as a pure function), `models`; then the rooms the jobs share,
`runtime`, `inference`, `artifacts`, `prompting`, `results`, `training`, `reports`, `launch`; and `recipes`, the jobs.
Configs ship inside as `crossmod/configs`. Importing any of them changes nothing in the environment."""
