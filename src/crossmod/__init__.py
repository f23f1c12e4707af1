"""crossmod: multimodal, multilingual, multicultural hate-speech detection in memes (Lightning + Hydra), one label head
per annotator culture. Subpackages: `data` (sources, shards, streaming), `models`, `evaluation` (every score as a pure
function), `training` (the jobs and what they share); configs ship inside as `crossmod/configs`."""
