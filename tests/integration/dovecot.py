"""A private Dovecot IMAP server for tests: loopback, a free port, one user, maildir in a temp dir.

It never reads the system's /etc/dovecot: the whole configuration, the sockets, the logs and the
mail live in one temp dir that `stop()` removes. Run as an ordinary user, everything runs as that
user. Run as root, Dovecot refuses root for logins and mail, so the login process runs as
dovenull (or nobody) and the mail belongs to nobody. `dovecot_binary()` is None where Dovecot is
not installed; tests skip on that.
"""

from __future__ import annotations

import grp
import imaplib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_SBIN = os.pathsep.join(["/usr/sbin", "/usr/local/sbin", "/sbin"])


def dovecot_binary() -> str | None:
    return shutil.which("dovecot", path=os.environ.get("PATH", "") + os.pathsep + _SBIN)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class DovecotServer:
    host = "127.0.0.1"

    def __init__(self, user: str = "alice", password: str = "c0rrect Horse\"battery-staple"):
        self.root = Path(tempfile.mkdtemp(prefix="orgmem-dovecot-"))
        self.user = user
        self.password = password
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.binary = dovecot_binary()
        if self.binary is None:
            raise RuntimeError("dovecot is not installed")

    # ------------------------------------------------------------ lifecycle

    def _config(self) -> Path:
        me = pwd.getpwuid(os.getuid()).pw_name
        group = grp.getgrgid(os.getgid()).gr_name
        login_user, mail_uid, mail_gid = me, os.getuid(), os.getgid()
        for sub in ("run", "state", "mail", "home", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:
            login_user = next((u for u in ("dovenull", "nobody") if _user_exists(u)), me)
            nobody = pwd.getpwnam("nobody")
            mail_uid, mail_gid = nobody.pw_uid, nobody.pw_gid
            self.root.chmod(0o711)  # the mail processes must reach mail/ and home/ below it
            for sub in ("mail", "home"):
                os.chown(self.root / sub, mail_uid, mail_gid)
        (self.root / "passwd").write_text(f"{self.user}:{{PLAIN}}{self.password}::::::\n")
        (self.root / "passwd").chmod(0o600)
        conf = self.root / "dovecot.conf"
        conf.write_text(f"""
protocols = imap
listen = {self.host}
base_dir = {self.root}/run
state_dir = {self.root}/state
instance_name = orgmem-test-{self.port}
log_path = {self.root}/log/dovecot.log
info_log_path = {self.root}/log/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_failure_delay = 0
default_internal_user = {me}
default_internal_group = {group}
default_login_user = {login_user}
first_valid_uid = 1
first_valid_gid = 1
mail_location = maildir:{self.root}/mail/%u
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {self.root}/passwd
}}
userdb {{
  driver = static
  args = uid={mail_uid} gid={mail_gid} home={self.root}/home/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = {self.host}
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
service stats {{
  unix_listener stats-reader {{
    user = {me}
  }}
  unix_listener stats-writer {{
    user = {me}
  }}
}}
""")
        return conf

    def start(self, timeout_s: float = 15.0) -> DovecotServer:
        for _ in range(5):  # the free port can be taken between probe and bind; try another
            self.port = _free_port()
            conf = self._config()
            self.process = subprocess.Popen(
                [self.binary, "-F", "-c", str(conf)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )
            if self._wait_ready(timeout_s):
                return self
            self.stop()
        raise RuntimeError(f"dovecot did not start:\n{self.log_tail()}")

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as conn:
                    if conn.recv(64).startswith(b"* OK"):
                        return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout:
            self.process.stdout.close()
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        texts = []
        log = self.root / "log" / "dovecot.log"
        if log.exists():
            texts.append(log.read_text(errors="replace"))
        if self.process is not None and self.process.poll() is not None and self.process.stdout:
            texts.append(self.process.stdout.read().decode(errors="replace"))
        return "\n".join("\n".join(texts).splitlines()[-lines:])

    def __enter__(self) -> DovecotServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.remove()

    # ------------------------------------------------------------ a test client

    def client(self) -> imaplib.IMAP4:
        conn = imaplib.IMAP4(self.host, self.port, timeout=10)
        conn.login(self.user, self.password)
        return conn

    def append(self, mailbox: str, *messages: bytes) -> None:
        conn = self.client()
        try:
            for raw in messages:
                typ, data = conn.append(f'"{mailbox}"', None, None, raw)
                assert typ == "OK", data
        finally:
            conn.logout()

    def create(self, mailbox: str) -> None:
        self._simple("create", mailbox)

    def delete(self, mailbox: str) -> None:
        self._simple("delete", mailbox)

    def _simple(self, command: str, mailbox: str) -> None:
        conn = self.client()
        try:
            typ, data = getattr(conn, command)(f'"{mailbox}"')
            assert typ == "OK", data
        finally:
            conn.logout()

    def uidvalidity(self, mailbox: str) -> int:
        conn = self.client()
        try:
            typ, data = conn.status(f'"{mailbox}"', "(UIDVALIDITY)")
            assert typ == "OK", data
            return int(re.search(rb"UIDVALIDITY (\d+)", data[0]).group(1))
        finally:
            conn.logout()
