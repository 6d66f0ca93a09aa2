"""Why one request missed the tokens it missed: one reason per request, as hosted APIs give it
(Anthropic's ``cache_miss_reason``, OpenAI's ``prompt_cache_diagnostics``), for a self-hosted
vLLM's prefix cache.

Every request misses something: vLLM always computes the last prompt token, so at least the tail
past the last full block within ``prompt_tokens - 1`` is computed. The reason is the cause of the
*first* token it computed:

* ``partial``: it hit every full block it could; only the partial last block (and the last
  token) was computed;
* ``no_room``: the pool cannot hold it at all (vLLM refuses it);
* ``evicted``: an unlimited cache would have hit further: the blocks were computed before and the
  pool evicted them;
* else the chain broke at a block never computed before. Against the recent request it shares
  the longest run of leading lines with (``busters.Divergence``):
  * the kind of the buster it counts for (``iso_timestamp``, ``tools``, ``template_history``, ...:
    ``busters.KINDS``), at that finding's message;
  * ``system_changed``, ``tools_changed`` or ``messages_changed`` (with the message index): the
    first differing line is in the system prompt (or template text before the first message), the
    tool list, or a later message (template text before a message reads as that message's, after
    the last message as the end's: no index);
  * ``cold``: no recent request shares its first line, or the earlier request's lines are all
    leading lines of this one: what follows is new.

Block-id traces and token-id requests have no text to compare: their chain breaks are ``cold``
(the block was never computed before), the others as above.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .busters import Divergence, Finding
from .hashing import hittable_tokens
from .predict import Outcome


class MissReason(StrEnum):
    """Reasons that are not a buster's kind (those are ``busters.KINDS`` and ``template_history``)."""

    PARTIAL = "partial"
    NO_ROOM = "no_room"
    EVICTED = "evicted"
    COLD = "cold"
    SYSTEM_CHANGED = "system_changed"
    TOOLS_CHANGED = "tools_changed"
    MESSAGES_CHANGED = "messages_changed"


@dataclass(frozen=True)
class RequestMiss:
    """One request's miss reason (module doc)."""

    reason: str
    """A ``MissReason`` or a buster's kind."""
    missed_tokens: int
    """Prompt tokens it computed (``prompt_tokens - cached``)."""
    first_divergent_block: int
    """Its first block not served from cache (0-based)."""
    message_index: int | None = None
    """The message where it parted from ``earlier`` (None: template text after the last message,
    or no text to tell)."""
    role: str | None = None
    """That line's role (``system``, ``user``, ``tools``, ``template`` ...)."""
    earlier: str | None = None
    """The earlier request it shares the most leading lines with (``file:line``), if any."""

    def as_json(self) -> dict[str, object]:
        return {"miss_reason": str(self.reason), "missed_tokens": self.missed_tokens,
                "first_divergent_block": self.first_divergent_block, "miss_message_index": self.message_index,
                "miss_role": self.role, "diverged_from": self.earlier}


def miss_of(o: Outcome, block_size: int, finding: Finding | None = None,
            divergence: Divergence | None = None) -> RequestMiss:
    """The reason ``o`` missed (module doc). ``finding``: the buster the finder counted it for;
    ``divergence``: where it parted from its nearest earlier request (None: none, or no text)."""
    missed = o.prompt_tokens - o.cached
    earlier = divergence.earlier if divergence is not None else None
    if not o.fits:
        return RequestMiss(MissReason.NO_ROOM, missed, 0, earlier=earlier)
    block = o.cached // block_size
    if o.cached >= hittable_tokens(o.prompt_tokens, block_size):
        return RequestMiss(MissReason.PARTIAL, missed, block, earlier=earlier)
    if o.cached < o.cached_unlimited:
        return RequestMiss(MissReason.EVICTED, missed, block, earlier=earlier)
    if finding is not None:
        return RequestMiss(finding.kind, missed, block, finding.message_index, finding.role, earlier)
    line = divergence.line if divergence is not None else None
    if line is None:
        return RequestMiss(MissReason.COLD, missed, block, earlier=earlier)
    if line.role == "tools":
        reason = MissReason.TOOLS_CHANGED
    elif line.role == "system" or (line.role == "template" and line.message_index == 0):
        reason = MissReason.SYSTEM_CHANGED
    else:
        reason = MissReason.MESSAGES_CHANGED
    return RequestMiss(reason, missed, block, line.message_index, line.role, earlier)
