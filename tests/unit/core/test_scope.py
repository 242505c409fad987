from datetime import UTC, datetime

from schemas.rows import Row
from services.core.scope import Scope, acl_tokens, admits


def t(*parts):
    return datetime(*parts, tzinfo=UTC)


def row(**kw):
    base = dict(row_id="r1", tenant="acme", text="x", ingest_position=1, ingested_at=t(2025, 1, 1), event_time=t(2025, 3, 1))
    base.update(kw)
    return Row(**base)


def test_undated_row_fails_as_of_but_passes_without_it():
    undated = row(event_time=None)
    assert not admits(undated, Scope("acme", as_of=t(2030, 1, 1)))
    assert admits(undated, Scope("acme"))


def test_as_of_bounds_event_time_inclusively():
    assert admits(row(), Scope("acme", as_of=t(2025, 3, 1)))
    assert not admits(row(), Scope("acme", as_of=t(2025, 2, 28)))


def test_row_ingested_after_known_at_is_excluded():
    late = row(ingested_at=t(2025, 9, 1))
    assert not admits(late, Scope("acme", known_at=t(2025, 8, 31)))
    assert admits(late, Scope("acme", known_at=t(2025, 9, 1)))


def test_known_at_uses_the_state_then_not_now():
    archived_now = row(state="archived")
    assert not admits(archived_now, Scope("acme"))
    assert admits(archived_now, Scope("acme", known_at=t(2025, 6, 1)))
    assert not admits(row(), Scope("acme", known_at=t(2025, 6, 1), inactive_at_known=frozenset({"r1"})))


def test_tenant_and_access_list():
    private = row(acl=["Alice@x.com", "group:finance"])
    assert not admits(private, Scope("other"))
    assert admits(private, Scope("acme"))  # readers None: unrestricted within the tenant
    assert admits(private, Scope("acme", readers=frozenset({"alice@x.com"})))
    assert admits(private, Scope("acme", readers=frozenset({"bob@x.com", "group:finance"})))
    assert not admits(private, Scope("acme", readers=frozenset({"bob@x.com"})))
    assert admits(row(acl=[]), Scope("acme", readers=frozenset({"bob@x.com"})))
    assert acl_tokens([]) == ["*"]


def test_metadata_filters():
    r = row(kind="email", author="a", thread="T")
    assert admits(r, Scope("acme", kinds=frozenset({"email"}), authors=frozenset({"a"}), threads=frozenset({"T"})))
    assert not admits(r, Scope("acme", kinds=frozenset({"ticket"})))


def test_principals_and_groups_are_separate_namespaces():
    from services.core.scope import acl_entry, reader_tokens_for

    def reads(acl, principal, groups=()):
        return admits(row(acl=acl), Scope("acme", readers=reader_tokens_for(principal, groups)))

    # The attack: a principal named like a group read the group's rows.
    assert not reads(["finance"], "finance")
    assert not reads(["group:finance"], "finance")
    assert reads(["finance"], "olga", ["Finance"]) and reads(["Group:Finance"], "olga", ["finance"])
    # A bare entry with an "@" names a user, without one a group; `user:` and `group:` say it outright.
    assert reads(["Alice@X.com"], "alice@x.com") and reads(["user:alice@x.com"], "alice@x.com")
    assert reads(["user:finance"], "finance") and not reads(["user:finance"], "olga", ["finance"])
    assert not reads(["bob@x.com"], "olga", ["bob@x.com"]) and reads(["group:bob@x.com"], "olga", ["bob@x.com"])
    assert not reads(["olga"], "olga")  # a principal without "@" is named `user:olga` in an access list
    # A name that starts with a kind cannot pose as the other kind.
    assert not reads(["user:bob"], "olga", ["user:bob"]) and not reads(["group:finance"], "group:finance")
    assert reads([], "finance")  # public rows stay public
    assert [acl_entry(e) for e in ("Finance", "a@x.com", "user:olga", "*")] == \
        ["group:finance", "user:a@x.com", "user:olga", "*"]


def test_key_callers_use_the_separate_namespaces():
    from services.core.keys import ApiKey

    key = ApiKey(key_id="0" * 12, tenant="acme", principal="finance", groups=("eng",), role="reader",
                 unrestricted=False, name="k", created_at=t(2025, 1, 1), created_by="tests")
    assert key.caller().readers == frozenset({"user:finance", "group:eng", "eng"})
    assert not admits(row(acl=["finance"]), Scope("acme", readers=key.caller().readers))
    assert admits(row(acl=["ENG"]), Scope("acme", readers=key.caller().readers))
