"""Item 4b: ``lookup_knowledge`` on a generated corpus of N sections (Markdown in a temp dir)."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from bench.common import Row, Sizes, median, percentile
from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.knowledge import KnowledgeAdapter
from sre_diag.tools.schemas import KnowledgeInput

__all__ = ["SECTIONS_PER_FILE", "run_knowledge", "write_corpus"]

SECTION = "4 tools: lookup_knowledge"
SECTIONS_PER_FILE = 20

_EN = (
    "payment api order service checkout gateway database pool connection timeout latency "
    "error rollback deploy release config cache redis kafka queue consumer lag retry backoff "
    "circuit breaker replica primary failover disk memory cpu throttle pod node kubelet ingress "
    "certificate tls dns resolver upstream downstream health probe readiness liveness alert "
    "pager runbook incident mitigation slow query index lock deadlock migration schema shard"
).split()
_ZH = (
    "数据库 连接池 耗尽 超时 回滚 发布 配置 缓存 队列 重试 熔断 主库 从库 切换 磁盘 内存 "
    "告警 值班 故障 排查 恢复 验证 慢查询 索引 死锁 迁移 证书 域名 解析 上游 下游 探针 "
    "支付 订单 结算 网关 延迟 错误率 限流 扩容 缩容 日志 监控 指标"
).split()


def _paragraph(rng: random.Random, words: int) -> str:
    parts = []
    for _ in range(words):
        parts.append(rng.choice(_ZH) if rng.random() < 0.4 else rng.choice(_EN))
    return " ".join(parts) + "。"


def write_corpus(folder: Path, sections: int, seed: int = 7) -> int:
    """Write ``sections`` H2 sections, ``SECTIONS_PER_FILE`` to a runbook; return files written."""
    rng = random.Random(seed)
    files = max(1, -(-sections // SECTIONS_PER_FILE))
    left = sections
    for f in range(files):
        count = min(SECTIONS_PER_FILE, left)
        left -= count
        service = f"{rng.choice(_EN)}-{rng.choice(_EN)}-{f}"
        lines = [f"# {service} 运维手册 runbook", ""]
        for s in range(count):
            lines += [f"## {rng.choice(_ZH)} {rng.choice(_EN)} 步骤 {s}", ""]
            lines += [_paragraph(rng, rng.randint(30, 60)), ""]
        sub = folder / f"team-{f % 10}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{service}.md").write_text("\n".join(lines), encoding="utf-8")
    return files


def _queries(n: int) -> list[str]:
    rng = random.Random(11)
    return [
        f"{rng.choice(_EN)} {rng.choice(_EN)} {rng.choice(_ZH)}{rng.choice(_ZH)} 怎么办"
        for _ in range(n)
    ]


async def _timed_call(adapter: KnowledgeAdapter, query: str) -> tuple[float, bool]:
    call = AdapterCall(tool_call_id="b", run_id="b", input=KnowledgeInput(query=query, top_k=3))
    started = time.perf_counter()
    result = await adapter.invoke(call)
    return (time.perf_counter() - started) * 1000, isinstance(result, Ready) and bool(result.items)


async def run_knowledge(sizes: Sizes) -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        folder, cache = Path(tmp) / "runbooks", Path(tmp) / "cache"
        files = write_corpus(folder, sizes.knowledge_sections)
        queries = _queries(sizes.knowledge_queries)
        adapter = KnowledgeAdapter(folder, cache)
        build_ms, _ = await _timed_call(adapter, queries[0])  # scan + split + index + persist
        reloaded = KnowledgeAdapter(folder, cache)
        load_ms, _ = await _timed_call(reloaded, queries[0])  # same fingerprint: load from disk
        times: list[float] = []
        hits = 0
        for query in queries:
            elapsed, hit = await _timed_call(adapter, query)
            times.append(elapsed)
            hits += int(hit)
        store = adapter.store
        assert store is not None  # a folder was given
        refresh: list[float] = []
        for _ in range(min(50, len(queries))):
            started = time.perf_counter()
            store.refresh()  # what every call does before searching (re-stat)
            refresh.append((time.perf_counter() - started) * 1000)
        builds = store.builds
    return [
        Row(
            SECTION, f"lookup p50 on {sizes.knowledge_sections} sections",
            round(median(times), 2), "ms",
            detail={
                "p99_ms": round(percentile(times, 99), 2),
                "queries": len(times),
                "queries_with_hits": hits,
                "refresh_restat_p50_ms": round(median(refresh), 2),
                "files": files,
            },
            note="adapter.invoke end to end; every call re-stats the folder first",
        ),
        Row(
            SECTION, "index build (first call, empty cache)", round(build_ms / 1000, 2), "s",
            detail={"load_from_cache_s": round(load_ms / 1000, 3), "builds": builds,
                    "sections": sizes.knowledge_sections},
        ),
    ]  # fmt: skip
