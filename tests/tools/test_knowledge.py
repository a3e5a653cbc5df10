"""lookup_knowledge over the bundled runbooks: retrieval quality, caching, failures, redaction."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from sre_diag.resources import BUNDLED_KNOWLEDGE
from sre_diag.tools.base import AdapterCall, AdapterErrorCode, Failed, Ready, ToolName
from sre_diag.tools.knowledge import (
    SNIPPET_CHARS,
    KnowledgeAdapter,
    KnowledgeStore,
    Segmenter,
    bigram_tokens,
    jieba_tokens,
)
from sre_diag.tools.runbooks import iter_sections
from sre_diag.tools.schemas import KnowledgeInput, KnowledgeItem

PAY, DB, PSP = "payment-api.zh.md", "db-connection-pool.en.md", "third-party-psp-timeout.zh.md"
ORDER, ROLLBACK, REDIS = "order-service.en.md", "deploy-rollback.zh.md", "redis-latency.en.md"

# (question, acceptable (path, heading) answers). Also the measurement set of the module docs.
QUESTIONS: list[tuple[str, set[tuple[str, str]]]] = [
    # Chinese
    ("支付接口大量 5xx，第一步应该看什么变更？", {(PAY, "第一步：确认最近的变更")}),
    ("如何判断是不是第三方支付渠道的问题", {(PSP, "如何判断是不是 PSP 的问题")}),
    ("回滚之后怎么验证故障已经恢复", {(ROLLBACK, "回滚后验证")}),
    ("什么情况下需要立即回滚", {(ROLLBACK, "何时回滚")}),
    ("支付服务故障有哪些止血措施", {(PAY, "止血措施")}),
    ("PSP 故障时如何切换到备用渠道", {(PSP, "处理措施")}),
    ("回滚完成后需要冻结发布吗", {(ROLLBACK, "回滚之后")}),
    # English
    ("symptoms of DB connection pool exhaustion", {(DB, "Symptoms")}),
    ("how to compensate orders after payment failures", {(ORDER, "Compensating affected orders")}),
    ("redis slowlog big keys blocking", {(REDIS, "Common causes")}),
    (
        "what causes a connection pool to drain: leaks, slow queries, shrunk pool",
        {(DB, "Common causes")},
    ),
    ("which queries hold database connections processlist", {(DB, "Diagnosis steps")}),
    ("move the reconciliation query to a replica or raise max_size", {(DB, "Remediation")}),
    ("checkout-web session lookup redis timeout", {(REDIS, "Symptoms")}),
    # mixed
    ("payment-api 回滚到上一个版本的步骤", {(ROLLBACK, "回滚步骤")}),
    ("stripe 延迟升高 timeout 症状", {(PSP, "典型症状")}),
    (
        "order-service 日志 payment-api returned 503 订单失败",
        {(ORDER, "Payment dependency failures"), (PAY, "影响评估")},
    ),
    (
        "连接池 in_use 等于 max_size waiting 增长",
        {(PAY, "第三步：检查数据库连接池"), (DB, "Symptoms")},
    ),
]


def _call(query: str, top_k: int = 3) -> AdapterCall[KnowledgeInput]:
    return AdapterCall("call-1", "run-1", KnowledgeInput(query=query, top_k=top_k))


async def _items(adapter: KnowledgeAdapter, query: str, top_k: int = 3) -> list[KnowledgeItem]:
    result = await adapter.invoke(_call(query, top_k))
    assert isinstance(result, Ready)
    assert not result.truncated
    items = [item for item in result.items if isinstance(item, KnowledgeItem)]
    assert len(items) == len(result.items)
    return items


@pytest.fixture
def runbooks(tmp_path: Path) -> Path:
    folder = tmp_path / "runbooks"
    shutil.copytree(BUNDLED_KNOWLEDGE, folder)
    return folder


@pytest.fixture
def adapter(tmp_path: Path) -> KnowledgeAdapter:
    return KnowledgeAdapter(BUNDLED_KNOWLEDGE, tmp_path / "cache")


def test_bundle_has_chinese_and_english_runbooks() -> None:
    paths = {section.path for section in iter_sections(BUNDLED_KNOWLEDGE)}
    assert {PAY, DB, PSP, ORDER, ROLLBACK, REDIS} <= paths


@pytest.mark.parametrize(("question", "expected"), QUESTIONS, ids=[q for q, _ in QUESTIONS])
async def test_right_section_first(
    adapter: KnowledgeAdapter, question: str, expected: set[tuple[str, str]]
) -> None:
    items = await _items(adapter, question)
    assert (items[0].path, items[0].heading) in expected, [(i.path, i.heading) for i in items]


async def test_projection_is_bounded(adapter: KnowledgeAdapter) -> None:
    items = await _items(adapter, "db connection pool exhausted max_size slow query", top_k=5)
    assert len(items) == 5
    assert [i.score for i in items] == sorted((i.score for i in items), reverse=True)
    for item in items:
        assert len(item.snippet) <= SNIPPET_CHARS
        assert item.score == round(item.score, 3) > 0
        assert item.title and item.heading and not item.path.startswith("/")
    assert any(item.snippet.endswith("…") for item in items)
    assert items[0].title == "DB connection pool exhaustion"


async def test_title_falls_back_to_stem_and_heading_is_a_path(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    (folder / "team").mkdir(parents=True)
    (folder / "team" / "kafka-lag.md").write_text(
        "Intro without a title.\n\n## Consumer lag\n\n### Rebalance storms\n\n"
        "Consumers rejoin the group in a loop; check session.timeout.ms.\n",
        encoding="utf-8",
    )
    adapter = KnowledgeAdapter(folder, tmp_path / "cache")
    items = await _items(adapter, "consumer rebalance storm session timeout")
    assert (items[0].title, items[0].heading, items[0].path) == (
        "kafka-lag",
        "Consumer lag > Rebalance storms",
        "team/kafka-lag.md",
    )


async def test_secrets_in_runbooks_are_masked(adapter: KnowledgeAdapter) -> None:
    items = await _items(adapter, "payment-api database dsn pool reference configuration")
    config = next(item for item in items if item.heading == "Reference configuration")
    assert "mysql://payments_rw:***@db-primary.internal:3306/payments" in config.snippet
    assert "Pa55w0rd" not in config.snippet


async def test_secret_cut_by_the_snippet_bound_does_not_leak(tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    filler = "kafka broker rebalance " * 17
    token = "Bearer " + "q9" * 60
    (folder / "kafka.md").write_text(f"# Kafka\n\n{filler}\n{token}\n", encoding="utf-8")
    items = await _items(KnowledgeAdapter(folder, tmp_path / "cache"), "kafka broker rebalance")
    assert "q9q9" not in items[0].snippet


async def test_unknown_words_find_nothing(adapter: KnowledgeAdapter) -> None:
    assert await _items(adapter, "zzqx 量子纠缠 flibbertigibbet") == []


async def test_index_is_persisted_and_reused(runbooks: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = KnowledgeAdapter(runbooks, cache)
    await _items(first, "回滚步骤")
    await _items(first, "redis latency")
    assert (first.store.builds, first.store.loads) == (1, 0)
    fingerprint = first.store.fingerprint
    assert fingerprint is not None
    assert (cache / "knowledge" / fingerprint).is_dir()

    second = KnowledgeAdapter(runbooks, cache)
    items = await _items(second, "回滚步骤")
    assert (second.store.builds, second.store.loads) == (0, 1)
    assert second.store.fingerprint == fingerprint
    assert items[0].path == ROLLBACK


async def test_index_is_rebuilt_when_one_file_changes(runbooks: Path, tmp_path: Path) -> None:
    adapter = KnowledgeAdapter(runbooks, tmp_path / "cache", rescan_interval_seconds=0)
    await _items(adapter, "redis latency")
    before = adapter.store.fingerprint
    redis = runbooks / REDIS
    redis.write_text(
        redis.read_text(encoding="utf-8") + "\n## Sentinel failover\n\nPromote the replica.\n",
        encoding="utf-8",
    )
    items = await _items(adapter, "sentinel failover promote replica")
    assert adapter.store.builds == 2
    assert adapter.store.fingerprint != before
    assert (items[0].path, items[0].heading) == (REDIS, "Sentinel failover")


async def test_touching_a_file_changes_the_fingerprint(runbooks: Path, tmp_path: Path) -> None:
    adapter = KnowledgeAdapter(runbooks, tmp_path / "cache", rescan_interval_seconds=0)
    await _items(adapter, "redis latency")
    before = adapter.store.fingerprint
    stat = (runbooks / REDIS).stat()
    os.utime(runbooks / REDIS, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    await _items(adapter, "redis latency")
    assert adapter.store.builds == 2
    assert adapter.store.fingerprint != before


async def test_concurrent_first_calls_build_once(adapter: KnowledgeAdapter) -> None:
    results = await asyncio.gather(*(adapter.invoke(_call("回滚步骤")) for _ in range(6)))
    assert all(isinstance(result, Ready) and result.items for result in results)
    assert adapter.store.builds == 1


async def test_corrupt_cache_is_rebuilt(runbooks: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = KnowledgeAdapter(runbooks, cache)
    await _items(first, "redis")
    assert first.store.fingerprint is not None
    directory = cache / "knowledge" / first.store.fingerprint
    (directory / "params.index.json").write_text("{not json", encoding="utf-8")
    second = KnowledgeAdapter(runbooks, cache)
    assert await _items(second, "redis slowlog")
    assert (second.store.builds, second.store.loads) == (1, 0)


async def test_unwritable_cache_still_answers(tmp_path: Path) -> None:
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("", encoding="utf-8")
    adapter = KnowledgeAdapter(BUNDLED_KNOWLEDGE, blocker)
    items = await _items(adapter, "redis slowlog")
    assert items[0].path == REDIS


@pytest.mark.parametrize("kind", ["missing", "file"])
async def test_unreadable_folder_is_unavailable(tmp_path: Path, kind: str) -> None:
    folder = tmp_path / "runbooks"
    if kind == "file":
        folder.write_text("not a folder", encoding="utf-8")
    adapter = KnowledgeAdapter(folder, tmp_path / "cache")
    assert await adapter.invoke(_call("anything")) == Failed(AdapterErrorCode.UNAVAILABLE)
    assert adapter.tool is ToolName.LOOKUP_KNOWLEDGE
    await adapter.aclose()


async def test_empty_folder_is_ready_and_then_picks_up_new_files(tmp_path: Path) -> None:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    adapter = KnowledgeAdapter(folder, tmp_path / "cache", rescan_interval_seconds=0)
    assert await adapter.invoke(_call("redis")) == Ready(items=[])
    (folder / "redis.md").write_text("# Redis\n\n## Eviction\n\nevicted_keys grows\n", "utf-8")
    items = await _items(adapter, "redis eviction")
    assert items[0].heading == "Eviction"


def _hit_at_1(segmenter: Segmenter, tmp_path: Path) -> int:
    store = KnowledgeStore(BUNDLED_KNOWLEDGE, tmp_path / segmenter.__name__, segmenter)
    index = store.refresh()
    assert index is not None
    hits = 0
    for question, expected in QUESTIONS:
        found = index.search(question, 1)
        hits += bool(found) and (found[0].section.path, found[0].section.heading) in expected
    return hits


def test_default_segmentation_is_at_least_as_good_as_bigrams(tmp_path: Path) -> None:
    assert _hit_at_1(jieba_tokens, tmp_path) >= _hit_at_1(bigram_tokens, tmp_path)


def test_segmenters_split_chinese_and_keep_english_words() -> None:
    assert "连接池" in jieba_tokens("数据库连接池耗尽")
    assert {"db", "pool", "exhausted"} <= set(jieba_tokens("DB pool exhausted"))
    assert bigram_tokens("连接池") == ["连接", "接池"]
    assert "的" not in jieba_tokens("支付服务的错误")


async def test_rescans_are_throttled(runbooks: Path, tmp_path: Path) -> None:
    adapter = KnowledgeAdapter(runbooks, tmp_path / "cache", rescan_interval_seconds=3600)
    await adapter.warm()
    assert adapter.store.builds == 1
    redis = runbooks / REDIS
    redis.write_text(redis.read_text(encoding="utf-8") + "\n## New\n\nText.\n", encoding="utf-8")
    await _items(adapter, "redis latency")
    assert adapter.store.builds == 1  # within the interval the checked index is used as is
