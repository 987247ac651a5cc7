"""What a receiver checks before a record may run: who signed it, and may they send it.

1. The signature verifies (``Verifier``): the record names its signer and proves it.
2. The signer is the identity of the envelope's ``source`` (``conversation:S4`` must be
   signed by ``conversation``), except for what a processor's runtime sends to its own
   input, signed by the receiving processor itself: its durable timers
   (``<processor>:timer``) and its retries (``attempt`` > 1) of envelopes it admitted.
3. That identity may write this topic with this body (the ``WritePolicy``; the
   processors' table is ``processors/protocol.py`` ``WRITERS``).

Anything else raises :class:`IdentityError`; the runtime dead-letters the record with
the reason and raises an alert. It never runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from hermesbus.contract.envelope import Envelope
from hermesbus.errors import IdentityError
from hermesbus.topics import identity_of

from ._keys import Keyring
from ._sign import Signer, Verifier

__all__ = ["Guard", "SourcePolicy", "WritePolicy"]


class WritePolicy(Protocol):
    """Which identity may write which topic with which body."""

    def identity_of(self, address: str) -> str:
        """The identity that signs for envelopes whose ``source`` is ``address``."""
        ...

    def refusal(self, topic: str, identity: str, envelope: Envelope) -> str | None:
        """Why ``identity`` may not write ``envelope`` to ``topic`` (no prefix); None if it may."""
        ...


class SourcePolicy:
    """The default for a processor of one's own: the signer must be the source; any topic."""

    def identity_of(self, address: str) -> str:
        return identity_of(address)

    def refusal(self, topic: str, identity: str, envelope: Envelope) -> str | None:
        return None


class Guard:
    """A processor's identity: it signs what the processor emits and checks what it reads."""

    def __init__(
        self,
        identity: str,
        keyring: Keyring,
        *,
        processor: str | None = None,
        policy: WritePolicy | None = None,
        prefix: str = "",
        reload: Callable[[], Keyring] | None = None,
    ) -> None:
        self.identity = identity
        self.timer_source = f"{processor or identity}:timer"
        """The source of the durable timers the runtime fires for this processor."""
        self.signer = Signer(identity, keyring)
        self.verifier = Verifier(keyring, reload)
        self.policy: WritePolicy = policy if policy is not None else SourcePolicy()
        self.prefix = prefix

    def sign(
        self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> tuple[tuple[str, bytes], ...]:
        return self.signer.sign(topic, key, value, headers)

    def verify(
        self, topic: str, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]]
    ) -> str:
        """The identity that signed the record; IdentityError if none did, or not validly."""
        return self.verifier.signer(topic, key, value, headers)

    def admit(self, topic: str, signer: str, envelope: Envelope, *, retry: bool) -> None:
        """Raise IdentityError unless ``signer`` may have sent ``envelope`` on ``topic``."""
        claimed = self.policy.identity_of(envelope.source)
        if signer == claimed:
            sender = signer
        elif signer == self.identity and envelope.source == self.timer_source:
            sender = signer  # a durable timer this processor set, fired by its runtime
        elif retry and signer == self.identity and envelope.metadata.attempt > 1:
            sender = claimed  # our own re-send of an envelope admitted before
        else:
            raise IdentityError(
                "identity.impersonation",
                f"signed by {signer!r}, but source {envelope.source!r} speaks for {claimed!r}",
            )
        base = topic[len(self.prefix) :] if self.prefix and topic.startswith(self.prefix) else topic
        reason = self.policy.refusal(base, sender, envelope)
        if reason is not None:
            raise IdentityError("identity.forbidden", reason)
