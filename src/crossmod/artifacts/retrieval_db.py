"""Retrieval culture adapters: an exported culture folder that classifies by its nearest labelled memes.

The folder holds the embedding model (as every export does), plus the database: `retrieval_db.safetensors`
(`embeddings` float32 N×D, `labels` int8 N: that culture's 0/1) and `retrieval_ids.json` (the N meme ids), with the
files' SHA-256, the size, the dimension and the vote's settings in `culture_card.json` (`kind: retrieval`). A new
culture, or a culture's revised guidelines, is a new label column over the same memes: no training.

    crossmod retrieval-db adapter=<adapter folder> shards=<shard dir> [splits=[train,val]] [skip_existing=true]

adds labelled memes (the culture's labels in the shards) to the database without retraining; predictions on their
near duplicates follow their labels. The database is data someone may have edited: it is read without pickle, its
checksums, shapes, dtypes, labels and finiteness are checked, and its ids must be unique printable strings.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from torch.utils.data import DataLoader

from crossmod.data.cache_files import exclusive, write_file
from crossmod.data.near_duplicates import IMAGE_BITS, NearDuplicates, content_key
from crossmod.data.paths import OutsideRoot, ensure_within
from crossmod.data.shards import sha256_file, write_json_atomic
from crossmod.inference.retrieval_bank import bank_of, embedded
from crossmod.models.retrieval.bank import Bank, retrieval_logits
from crossmod.models.retrieval.settings import RetrievalSettings
from crossmod.models.trusted_targets import DATA_ROOT, DATA_TARGETS, check_trusted
from crossmod.runtime.user_errors import UserError

DB_FILE = "retrieval_db.safetensors"
IDS_FILE = "retrieval_ids.json"
MAX_ID_CHARS = 1000
REBUILD = "export the run again with crossmod export kind=retrieval, or add memes with crossmod retrieval-db"


class DatabaseError(UserError, ValueError):
    """A retrieval database crossmod will not use: names the file and what is wrong (the fix: rebuild or add)."""

    def __init__(self, problem: str, fix: str | None = REBUILD) -> None:
        super().__init__(problem, fix)


@dataclass(frozen=True)
class Database:
    """One culture's labelled memes under one embedding model."""

    embeddings: torch.Tensor  # (N, D) float32
    labels: torch.Tensor  # (N,) 0/1
    ids: list[str]

    def bank(self, culture: str) -> Bank:
        return Bank.of(self.embeddings, {culture: self.labels}, self.ids)

    def plus(self, other: Database) -> Database:
        return Database(torch.cat([self.embeddings, other.embeddings]), torch.cat([self.labels, other.labels]), self.ids + other.ids)


class Embedder(L.LightningModule):
    """A classifier's meme embeddings through Lightning's predict loop (what a database is made of)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        return embedded(self.model, batch)


def embed_records(model: Any, records: list[dict[str, Any]], batch_size: int, device: torch.device) -> torch.Tensor:
    """Every record's meme embedding under the model's current weights, in record order: the Embedder on Lightning's
    predict loop, one device (the frozen-encoder probe's features, a retrieval export's scored memes)."""
    from crossmod.data.batches import SamplesToBatch
    from crossmod.inference.scoring import single_device_trainer

    if not records:
        return torch.zeros((0, model.backbone.output_dim), dtype=torch.float32)
    loader = DataLoader(records, batch_size=batch_size, collate_fn=SamplesToBatch(model.preprocessor))
    was_training = model.training
    outputs = single_device_trainer("gpu" if device.type == "cuda" else "cpu").predict(Embedder(model), dataloaders=loader) or []
    model.train(was_training)
    model.cpu()
    return torch.cat([output["embedding"] for output in outputs]).float()


def labelled(embeddings: torch.Tensor, labels: torch.Tensor, ids: list[str]) -> tuple[Database, int]:
    """The memes that carry the culture's label (0/1), and how many did not (-1: left out, and counted)."""
    keep = labels >= 0
    kept_ids = [meme_id for meme_id, k in zip(ids, keep.tolist()) if k]
    return Database(embeddings[keep].float().contiguous(), labels[keep].to(torch.int8), kept_ids), int((~keep).sum())


def _run_datamodule(run_dir: Path, config: dict[str, Any], model: Any) -> Any:
    """The run's data module, its data config checked before it is built, reading the shards the run trained on.

    Read only: the run's config.yaml may come from someone else, so the folders it names are never written (no
    conversion, no lock file, no fold assignment added); shards that are not there stop the job naming them."""
    data = config.get("data")
    check_trusted(data, run_dir / "config.yaml", root=DATA_ROOT, targets=DATA_TARGETS)
    datamodule = instantiate(data, _recursive_=True)
    datamodule.connect(model.preprocessor)
    dataset = datamodule.dataset_dir
    if not isinstance(dataset, str) and not (Path(dataset) / "manifest.json").is_file():
        raise DatabaseError(
            f"{run_dir}: the shards its training memes are read from ({dataset}, from its config.yaml) are not on this machine",
            "run this where the run trained, or convert its dataset there first (crossmod prepare with the run's data settings)",
        )
    return datamodule


def run_training_bank(run_dir: Path, config: dict[str, Any], model: Any) -> Bank:
    """The run's training memes (its training folds only: the data module's bank loader, the one RGCL mines from)
    with every head's labels, embedded by `model`'s weights in Lightning's predict loop."""
    datamodule = _run_datamodule(run_dir, config, model)
    datamodule.setup("fit")
    # one device of this machine (a GPU when it has one): export.py is one process
    trainer = L.Trainer(
        accelerator="auto", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    outputs = trainer.predict(Embedder(model), dataloaders=datamodule.bank_dataloader(), return_predictions=True) or []
    return bank_of(outputs, model.heads)


def run_training_memes(run_dir: Path, config: dict[str, Any], model: Any, culture: str) -> tuple[Database, int]:
    """One culture's database from the run's training memes, and how many of them lacked its label."""
    bank = run_training_bank(run_dir, config, model)
    return labelled(bank.embeddings, bank.labels[culture], bank.ids)


VOTED_STAGES = ("val", "test")  # the run's selection memes and its held-out ones


def vote_metrics(
    run_dir: Path, config: dict[str, Any], model: Any, culture: str, database: Database, settings: RetrievalSettings
) -> dict[str, dict[str, float] | None]:
    """What a retrieval export scores by its own vote (the database's k nearest memes, `settings`) on the run's
    selection (val) and held-out (test) memes, whatever rule trained the run: the numbers its card reports. None for a
    stage the run has no memes in."""
    from crossmod.evaluation.metrics import head_scores

    datamodule = _run_datamodule(run_dir, config, model)
    datamodule.setup("fit")
    bank, head = database.bank(culture), model.heads[culture]
    batch = datamodule.streaming.eval_batch_size or datamodule.streaming.batch_size
    scores: dict[str, dict[str, float] | None] = {}
    for stage in VOTED_STAGES:
        records = datamodule.stage_records(stage, images=True)
        if not records:
            scores[stage] = None
            continue
        embeddings = embed_records(model, records, batch, model.device)
        logits = retrieval_logits(embeddings, [r["id"] for r in records], bank, settings.k, settings.weighting)[culture]
        target = head.labels([r["labels"].get(culture) for r in records])
        scores[stage] = head_scores(head.probabilities(logits.float()), target, head)
    return scores


DB_NAME = re.compile(r"^retrieval_db(-[0-9a-f]{12})?\.safetensors$")  # DB_FILE, or an appended generation of it
IDS_NAME = re.compile(r"^retrieval_ids(-[0-9a-f]{12})?\.json$")
LOCK_FILE = ".retrieval_db.lock"


def write_database(folder: Path, database: Database, generation: bool = False) -> dict[str, Any]:
    """Write the database files and return the card's facts about them (`files`: their names, `sha256`: by name).

    `generation`: the files take names of their own content (`retrieval_db-<sha256 prefix>.safetensors`) beside the
    ones the card names, so that replacing the card afterwards is the one step that switches the adapter to them: a
    kill at any instant leaves the old card with its old files, or the new card with its new ones (an append). Every
    file is written whole under a fresh name and renamed into place, never through a link."""
    from safetensors.torch import save

    Bank.of(database.embeddings, {"check": database.labels}, database.ids)  # the same checks as a loaded one
    tensors = {"embeddings": database.embeddings.float().contiguous(), "labels": database.labels.to(torch.int8).contiguous()}
    contents = {"embeddings": save(tensors), "ids": json.dumps(database.ids, ensure_ascii=False).encode("utf-8")}
    digests = {role: hashlib.sha256(data).hexdigest() for role, data in contents.items()}
    names = {"embeddings": DB_FILE, "ids": IDS_FILE}
    if generation:
        names = {role: f"{Path(name).stem}-{digests[role][:12]}{Path(name).suffix}" for role, name in names.items()}
    for role, data in contents.items():
        write_file(folder / names[role], data, f"retrieval {role}", user_folder=True)
    counts = torch.bincount(database.labels.long(), minlength=2).tolist()
    return {
        "size": len(database.ids),
        "dim": int(database.embeddings.shape[1]),
        "labels": {"0": counts[0], "1": counts[1]},
        "files": names,
        "sha256": {names[role]: digests[role] for role in names},
    }


def database_files(folder: Path, facts: dict[str, Any]) -> dict[str, Path]:
    """The database's two files as the card names them (`files`; DB_FILE and IDS_FILE for a card from before
    appends named their own), each a plain name of the database's pattern, inside the folder."""
    named = facts.get("files") or {"embeddings": DB_FILE, "ids": IDS_FILE}
    card = folder / "culture_card.json"
    if not isinstance(named, dict) or set(named) != {"embeddings", "ids"}:
        raise DatabaseError(f"{card}: retrieval.files must name exactly the embeddings and the ids file")
    for role, pattern in (("embeddings", DB_NAME), ("ids", IDS_NAME)):
        if not isinstance(named[role], str) or not pattern.match(named[role]):
            raise DatabaseError(f"{card}: retrieval.files.{role} is {named[role]!r}"[:300] + ", not a database file name of this folder")
    return {role: folder / name for role, name in named.items()}


def _stale_generations(folder: Path, keep: dict[str, Path]) -> None:
    """Database files no card names any more (an append's old generation, or one a killed append left): removed,
    under the adapter's lock."""
    kept = {path.name for path in keep.values()}
    for path in folder.iterdir():
        if (DB_NAME.match(path.name) or IDS_NAME.match(path.name)) and path.name not in kept and not path.is_dir():
            path.unlink(missing_ok=True)


def read_database(folder: Path, facts: Any) -> Database:
    """The database as the card describes it, or a DatabaseError naming the file and what does not hold."""
    from crossmod.artifacts.adapter_folder import load_weights

    card = folder / "culture_card.json"
    if not isinstance(facts, dict) or not isinstance(facts.get("sha256"), dict):
        raise DatabaseError(f"{card}: retrieval is not an object with sha256 checksums")
    size, dim = facts.get("size"), facts.get("dim")
    if not (
        isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 1
        and isinstance(dim, int)
        and not isinstance(dim, bool)
        and dim >= 1
    ):
        raise DatabaseError(f"{card}: retrieval.size and retrieval.dim must be positive integers, got {size!r} and {dim!r}"[:300])
    files = database_files(folder, facts)
    for role, path in files.items():
        name = path.name
        try:
            ensure_within(folder, path, "file", name)
        except OutsideRoot as error:
            raise DatabaseError(f"{folder}: {error}") from None
        if not path.is_file():
            raise DatabaseError(f"{path} is missing")
        if role == "ids" and path.stat().st_size > ids_file_bound(size):
            raise DatabaseError(
                f"{path}: {path.stat().st_size:,} bytes, more than {size} ids of at most {MAX_ID_CHARS} characters take "
                f"({ids_file_bound(size):,} bytes); not read"
            )
        if sha256_file(path) != facts["sha256"].get(name):
            raise DatabaseError(f"{path}: its SHA-256 is not the one culture_card.json records (changed or truncated)")
    db_path = files["embeddings"]
    tensors = load_weights(db_path, REBUILD)
    if set(tensors) != {"embeddings", "labels"}:
        raise DatabaseError(f"{db_path}: holds {sorted(tensors)[:5]}, not exactly embeddings and labels")
    embeddings, labels = tensors["embeddings"], tensors["labels"]
    if embeddings.dtype != torch.float32 or tuple(embeddings.shape) != (size, dim):
        raise DatabaseError(
            f"{db_path}: embeddings are {embeddings.dtype} {tuple(embeddings.shape)}, the card says float32 ({size}, {dim})"
        )
    if labels.dtype != torch.int8 or tuple(labels.shape) != (size,):
        raise DatabaseError(f"{db_path}: labels are {labels.dtype} {tuple(labels.shape)}, the card says int8 ({size},)")
    if not torch.isfinite(embeddings).all() or (embeddings.norm(dim=1) == 0).any():
        row = int((~torch.isfinite(embeddings).all(1) | (embeddings.norm(dim=1) == 0)).nonzero()[0])
        raise DatabaseError(f"{db_path}: embedding row {row} is not finite or is zero (no direction to compare)")
    if size > 1 and bool((embeddings == embeddings[0]).all()):
        raise DatabaseError(f"{db_path}: every embedding row is the same: every meme would get the same neighbours")
    if ((labels != 0) & (labels != 1)).any():
        row = int(((labels != 0) & (labels != 1)).nonzero()[0])
        raise DatabaseError(f"{db_path}: label row {row} is {int(labels[row])}, not 0 or 1")
    ids = _read_ids(files["ids"], size)
    return Database(embeddings, labels, ids)


def ids_file_bound(size: int) -> int:
    """The most bytes `size` ids can take as JSON: each character escaped (`\\uXXXX`, 6 bytes), quotes and a comma."""
    return 2 + size * (6 * MAX_ID_CHARS + 3)


def _read_ids(path: Path, size: int) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise DatabaseError(f"{path}: not UTF-8 JSON ({type(error).__name__})") from None
    if not isinstance(ids, list) or len(ids) != size:
        raise DatabaseError(
            f"{path}: must be a list of {size} ids, holds a {type(ids).__name__} of {len(ids) if isinstance(ids, list) else '?'}"
        )
    check_ids(ids, str(path))
    return ids


def check_ids(ids: list[Any], where: str) -> None:
    """Ids a database may hold: printable strings of 1–MAX_ID_CHARS characters, each once (the rule every load applies,
    so `add` refuses what a later load would)."""
    bad = next((n for n, i in enumerate(ids) if not isinstance(i, str) or not i or len(i) > MAX_ID_CHARS or not i.isprintable()), None)
    if bad is not None:
        raise DatabaseError(f"{where}: id {bad} is {str(ids[bad])[:80]!r}, not a printable string of 1–{MAX_ID_CHARS} characters")
    seen: set[str] = set()
    repeated = next((i for i in ids if i in seen or seen.add(i)), None)
    if repeated is not None:
        raise DatabaseError(f"{where}: id {repeated[:80]!r} repeats (each meme once)")


def attach(model: Any, folder: Path, card: dict[str, Any]) -> None:
    """Make a loaded classifier score by the folder's database (its vote's settings from the card)."""
    facts = card.get("retrieval")
    database = read_database(folder, facts)
    settings = {key: facts[key] for key in ("k", "weighting") if key in facts}
    try:
        vote = RetrievalSettings.of(settings)
    except (TypeError, ValueError) as error:
        raise DatabaseError(f"{folder / 'culture_card.json'}: retrieval settings {settings}: {error}"[:300]) from None
    model.score_by_retrieval(database.bank(card["culture"]), vote)


def _shards_dataset(shards: str) -> str | None:
    """The dataset a local shard folder holds (its manifest), or None."""
    manifest = Path(str(shards)) / "manifest.json"
    try:
        return json.loads(manifest.read_text()).get("dataset") if manifest.is_file() else None
    except (ValueError, AttributeError):
        return None


def unseen_by_the_run(folder: Path, card: dict[str, Any], records: list[dict[str, Any]], shards: str) -> list[str]:
    """Ids of the memes the adapter's run held out or chose its weights on (`trained_on` and the run's manifest copy in
    the export): added to the database they would be scored as neighbours of themselves."""
    trained_on = card.get("trained_on") or {}
    if not trained_on.get("dataset") or _shards_dataset(shards) != trained_on["dataset"]:
        return []
    from crossmod.data.folds import find_folds, find_inner_validation
    from crossmod.data.selection_rules import fold_splits
    from crossmod.data.shards import shard_split

    manifest = json.loads((folder / "manifest.json").read_text()) if (folder / "manifest.json").is_file() else {}
    roles = manifest.get("split_roles") or {}
    cv = (card.get("training_config") or {}).get("cv") or {}
    val_splits = set(trained_on.get("val_splits") or roles.get("val") or [])
    rule = trained_on.get("selection_rule")
    fold = trained_on.get("fold")
    if fold is None:  # the dataset's own splits: its test split is held out, its val split selected on
        held = set(trained_on.get("test_splits") or roles.get("test") or ["test"])
        return [
            r["id"] for r in records if shard_split(r) in held or (rule in ("dataset_val", "val_split") and shard_split(r) in val_splits)
        ]
    train_splits = trained_on.get("train_splits") or roles.get("train") or []
    entry = find_folds(manifest, trained_on["num_folds"], trained_on.get("fold_seed") or 0, sorted(fold_splits(list(train_splits))))
    if entry is None:
        return []
    inner = find_inner_validation(entry, fold, cv.get("inner_share", 0.15)) if rule == "inner" else None
    chosen_on = set(inner["groups"]) if inner else set()
    unseen = []
    for record in records:
        in_folds = shard_split(record) in entry["splits"]  # a split-less release's memes are all in NO_SPLIT
        if in_folds and (entry["assignment"].get(record.get("group")) == fold or record.get("group") in chosen_on):
            unseen.append(record["id"])
        elif rule in ("dataset_val", "val_split") and shard_split(record) in val_splits:
            unseen.append(record["id"])
    return unseen


UNSEEN_FILE = "unseen_memes.json"  # content keys of the memes the run held out or selected on (src/crossmod/data/near_duplicates.py)


def unseen_content(run_dir: Path, config: dict[str, Any], model: Any, export: Path, card: dict[str, Any]) -> dict[str, Any]:
    """Write the content keys of the memes the exported run held out or chose its weights on into the export, so that
    `add` recognises them under any id (re-encoded, resized, re-cased); the card's summary of them."""
    from crossmod.data.predict_inputs import read_inputs

    dataset = _run_datamodule(run_dir, config, model).dataset_dir
    records = list(read_inputs(dataset))
    unseen = set(unseen_by_the_run(export, card, records, str(dataset)))
    keys = NearDuplicates(content_key(r) for r in records if r["id"] in unseen)
    write_json_atomic(export / UNSEEN_FILE, keys.to_json())
    return {"file": UNSEEN_FILE, "memes": len(keys), "match": f"same normalised text and image dHash within {IMAGE_BITS} of 256 bits"}


def _unseen_keys(folder: Path, card: dict[str, Any]) -> NearDuplicates:
    path = folder / UNSEEN_FILE
    if not (card.get("retrieval") or {}).get("unseen"):
        return NearDuplicates([])  # an export written before content keys: ids are all it can check
    if path.is_symlink() or not path.is_file():
        raise DatabaseError(f"{path} is missing (the card lists it): the export is incomplete", REBUILD)
    try:
        return NearDuplicates.from_json(json.loads(path.read_text()), str(path))
    except ValueError as error:
        raise DatabaseError(str(error), REBUILD) from None


def _source_of(shards: str) -> dict[str, Any]:
    """How the card names memes it took in: the shards' dataset and fingerprint (their manifest's) and the folder's name,
    never a path of this machine (a card is shared with the adapter)."""
    manifest = Path(shards) / "manifest.json"
    try:
        facts = json.loads(manifest.read_text()) if manifest.is_file() else {}
    except ValueError:
        facts = {}
    source = {"from": Path(shards.rstrip("/")).name if "://" not in shards else shards.split("?")[0]}
    if isinstance(facts, dict):
        source.update({k: facts[k] for k in ("dataset", "fingerprint") if isinstance(facts.get(k), str)})
    return source


def add(
    folder: Path,
    shards: str,
    splits: list[str] | None,
    skip_existing: bool,
    batch_size: int = 32,
    allow_held_out: bool = False,
    bases: dict[str, str] | None = None,
) -> dict[str, int]:
    """Embed the shards' memes that carry the culture's label and append them to the folder's database. Their ids are
    checked before anything is embedded or written; memes the adapter's run held out or selected on are refused unless
    `allow_held_out` (scores on them are then not held-out scores)."""
    # two appends to one adapter take turns: each reads the database the other left (none of its rows is lost)
    with exclusive(Path(folder) / LOCK_FILE, "retrieval adapter's lock"):
        return _add(Path(folder), shards, splits, skip_existing, batch_size, allow_held_out, bases)


def _add(
    folder: Path,
    shards: str,
    splits: list[str] | None,
    skip_existing: bool,
    batch_size: int,
    allow_held_out: bool,
    bases: dict[str, str] | None,
) -> dict[str, int]:
    from crossmod.artifacts.loading import load
    from crossmod.data.predict_inputs import read_inputs
    from crossmod.inference.scoring import predict_in_order, single_device_trainer

    model, info = load(folder, bases=bases, command=f"crossmod retrieval-db adapter={folder} shards={shards}", expect="culture")
    card = info["card"]
    if card.get("kind") != "retrieval":
        raise DatabaseError(
            f"{folder} is a {card.get('kind', 'head')} export; memes are added to retrieval adapters (crossmod export kind=retrieval)"
        )
    culture, bank = card["culture"], model.retrieval_bank  # read and checked by the loader
    current = Database(bank.embeddings.cpu(), bank.labels[culture].to(torch.int8).cpu(), bank.ids)
    records = list(read_inputs(shards, splits))
    with_label = [r for r in records if (r.get("labels") or {}).get(culture) in (0, 1)]
    check_ids([r["id"] for r in with_label], f"{shards}")  # what every later load requires, before anything is written
    by_id = set(unseen_by_the_run(folder, card, with_label, shards))
    keys = _unseen_keys(folder, card)
    by_content = {r["id"] for r in with_label if r["id"] not in by_id and keys.matches(content_key(r))} if len(keys) else set()
    unseen = [r["id"] for r in with_label if r["id"] in by_id | by_content]
    if unseen and not allow_held_out:
        raise DatabaseError(
            f"{shards}: {len(unseen)} of these memes were held out or chosen on by the run {folder} was exported from "
            f"({len(by_id)} by id, {len(by_content)} copies under other ids by content; e.g. {unseen[:3]}): as neighbours "
            "they would score themselves",
            "add other memes, or pass allow_held_out=true to add them knowingly (scores on them are then not held-out scores)",
        )
    known = set(current.ids)
    repeated = [r["id"] for r in with_label if r["id"] in known]
    if repeated and not skip_existing:
        raise DatabaseError(
            f"{shards}: {len(repeated)} memes are already in {folder} (e.g. {repeated[:3]}); skip_existing=true adds the others"
        )
    new = [r for r in with_label if r["id"] not in known]
    counts = {
        "read": len(records),
        "unlabelled": len(records) - len(with_label),
        "already_in": len(repeated),
        "added": len(new),
        "held_out_added": len(set(unseen) & {r["id"] for r in new}),
    }
    if new:
        rows = predict_in_order(single_device_trainer(), Embedder(model), new, batch_size, model.preprocessor)
        embeddings = torch.tensor([row["embedding"] for row in rows], dtype=torch.float32)
        labels = torch.tensor([int(r["labels"][culture]) for r in new], dtype=torch.int8)
        facts = write_database(folder, current.plus(Database(embeddings, labels, [str(r["id"]) for r in new])), generation=True)
        card["retrieval"] = {
            **card["retrieval"],
            **facts,
            "sources": [
                *card["retrieval"].get("sources", []),
                {**_source_of(str(shards)), "memes": len(new), "held_out_or_selection_memes": counts["held_out_added"]},
            ],
        }
        # the commit: the card, through a fresh temporary file and a rename (a link planted at its name is replaced,
        # never written through), now names the new files; then the old generation goes
        write_json_atomic(folder / "culture_card.json", json.loads(json.dumps(card, default=str)))
        _stale_generations(folder, database_files(folder, card["retrieval"]))
    return counts
