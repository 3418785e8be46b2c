"""Runners in their own interpreter: a runtime whose pins conflict with the suite's (or with
another runtime's) runs in its own virtual environment, and the suite talks to it over a pipe.

Theory of operation
-------------------
``agentturn conform --runner pkg.mod:Name --python PY`` (or ``--venv DIR``) makes an
:class:`IsolatedRunner` in the suite's process. It starts one child, ``PY -m
agentturn.tools.conform.isolated pkg.mod:Name``, and keeps it for the whole suite (a runtime's
imports are paid once). The two speak JSON, one object a line:

* the child loads the runner and says ``{"name": ..., "modes": ["openai-chat", ...]}``;
* for each run the parent sends ``{"task": Task.to_dict()}``, and the child runs the runner
  with :class:`HttpTools` (each call is a ``POST {task.tools_url}/{name}`` to the suite's
  server, which records it on the run's :class:`~.protocol.Tools` as if it ran in-process)
  and answers ``{"result": RunResult.to_dict(), "outbound": [...]}``.

The child imports this agentturn from a private folder on ``PYTHONPATH`` that holds only a
link to the package, so the venv needs no agentturn install, only agentturn's own
dependencies. The child's ``stdout`` is the protocol: whatever the runtime prints goes to
stderr, which the parent keeps in a temporary file (its tail is the error of a child that
died). A run that does not answer within the task's timeout ends the child (by its own
handle); the next run starts a new one.

Nothing beyond 127.0.0.1: the child's environment turns the frameworks' telemetry off
(:data:`QUIET`), and an audit hook in the child refuses, before it happens, every name lookup
(``getaddrinfo``, ``gethostbyname``, ``gethostbyname_ex``, ``gethostbyaddr``), ``connect``,
``sendto`` and ``sendmsg`` of the child's Python sockets whose host is not exactly loopback
(an address in 127.0.0.0/8, ``::1``, or the name ``localhost``; a name is never matched by its
prefix), and every program the child would start (``subprocess.Popen``, ``os.exec*``,
``os.posix_spawn``, ``os.spawn*``, ``os.system``, ``os.fork``): another program would carry no
hook. Each refusal is reported back (``outbound``) and gathered in
:attr:`IsolatedRunner.outbound`, which the command prints. The hook sees what Python's sockets
do; a C extension that opens its own sockets is beyond it (none of the measured runtimes
does). A runner run in-process (no ``--python``/``--venv``) gets neither the hook nor
:data:`QUIET`.

:func:`ensure_venv` makes ``DIR`` from a requirements list and caches it: the list (plus
agentturn's own dependencies) is written to ``DIR/conform-requirements.txt`` after a good
install, and a venv whose file says the same is reused. A runner module may name its pins in
a ``REQUIREMENTS`` list; its framework must then be imported only inside ``run``, so that the
suite can read the list without the framework.
"""

from __future__ import annotations

import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

from .protocol import Mode, RunResult, Task, Tools

__all__ = ["QUIET", "HttpTools", "IsolatedRunner", "ensure_venv", "main", "requirements_of"]

#: The child's environment: no telemetry, no tracing export, no update checks, no hub.
QUIET: Mapping[str, str] = {
    "OPENAI_AGENTS_DISABLE_TRACING": "1",   # openai-agents: its trace exporter
    "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false",
    "OTEL_SDK_DISABLED": "true", "DO_NOT_TRACK": "1", "ANONYMIZED_TELEMETRY": "false",
    "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",  # smolagents' hub
    "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
    "MSWEA_SILENT_STARTUP": "1",
    "OPENAI_API_KEY": "conform", "ANTHROPIC_API_KEY": "conform",  # some check it is set
    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    "PYTHONUNBUFFERED": "1",
}

#: agentturn's own dependencies, when its metadata cannot be read (a source checkout).
_OWN_DEPENDENCIES = ("attrs>=23.1", "transitions>=0.9.2", "cattrs>=23.1")


class HttpTools(Tools):
    """The suite's tools seen from another process: each call posts to ``tools_url``."""

    def __init__(self, tools_url: str) -> None:
        super().__init__()
        self.tools_url = tools_url.rstrip("/")

    def call(self, name: str, arguments: Any) -> str:
        """Every call reaches the server and is recorded there: raw text (which the runtime
        did not parse) goes as it is (``?raw=1``); a value JSON cannot hold goes as its
        ``repr``, as :class:`~.protocol.Tools` records it in-process."""
        import urllib.request

        url = f"{self.tools_url}/{name}"
        if not isinstance(arguments, str):
            try:
                body = json.dumps(arguments).encode()
            except (TypeError, ValueError):
                arguments = repr(arguments)
        if isinstance(arguments, str):
            url += "?raw=1"
            body = arguments.encode("utf-8", "surrogatepass")
        request = urllib.request.Request(url, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:  # 127.0.0.1 only
            return str(json.loads(answer.read())["output"])

    async def acall(self, name: str, arguments: Any) -> str:
        import asyncio

        return await asyncio.to_thread(self.call, name, arguments)


# --- the parent ------------------------------------------------------------------------------


class IsolatedRunner:
    """A runner that lives in another interpreter (see the module's docstring)."""

    def __init__(self, spec: str, python: str | os.PathLike[str],
                 env: Mapping[str, str] | None = None, path: Sequence[str] = (),
                 start_timeout: float = 120.0) -> None:
        """``spec``: the runner, ``pkg.module:Name``, importable in ``python`` (with
        ``path``, folders added to the child's ``PYTHONPATH``); ``env``: more environment."""
        self.spec = spec
        self.python = str(python)
        self.extra_env = dict(env or {})
        self.extra_path = [str(p) for p in path]
        self.start_timeout = start_timeout
        #: Every non-loopback address the child tried to reach (and was refused).
        self.outbound: list[str] = []
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._log: IO[str] | None = None
        self._ended = False
        self._path = tempfile.mkdtemp(prefix="agentturn-conform-path-")
        # only agentturn on the child's path: never the suite's own site-packages
        os.symlink(pathlib.Path(__file__).resolve().parents[2],
                   os.path.join(self._path, "agentturn"))
        hello = self._start()
        self.name = str(hello["name"])
        self.modes: tuple[Mode, ...] = tuple(Mode.parse(m) for m in hello["modes"])

    def _start(self) -> dict[str, Any]:
        # the user's own PYTHONPATH is kept, after agentturn's folder and ``path``
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {**os.environ, **QUIET, **self.extra_env,
               "PYTHONPATH": os.pathsep.join([self._path, *self.extra_path, *inherited])}
        # kept open for the child's life, closed by _stop
        self._log = tempfile.TemporaryFile("w+", prefix="agentturn-conform-child-")  # noqa: SIM115
        self._proc = subprocess.Popen(
            [self.python, "-m", "agentturn.tools.conform.isolated", self.spec],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
            env=env, bufsize=1)
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self._proc.stdout, self._lines),
                         name="conform-child", daemon=True).start()
        hello = self._answer(self.start_timeout)
        if hello is None or "modes" not in hello:
            detail = hello.get("error") if hello else self._tail()
            self._stop()
            raise RuntimeError(f"the runner {self.spec} did not start in {self.python}: "
                               f"{detail}")
        if not hello["modes"]:
            self._stop()
            raise RuntimeError(f"the runner {self.spec} speaks no mode: every row would be n/a")
        return hello

    @staticmethod
    def _read(stream: IO[str] | None, lines: queue.Queue[str | None]) -> None:
        assert stream is not None
        for line in stream:
            lines.put(line)
        lines.put(None)

    def _answer(self, timeout: float) -> dict[str, Any] | None:
        """The child's next message; None when it did not say one in time, or ended."""
        self._ended = False
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:  # its stdout closed: it is ending
            self._ended = True
            return None
        return dict(json.loads(line))

    def _tail(self, size: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read()[-size:].strip()

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()  # our own child, by its handle
            self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def run(self, task: Task, tools: Tools) -> RunResult:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._start()
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(json.dumps({"task": task.to_dict()}) + "\n")
            self._proc.stdin.flush()
            answer = self._answer(task.timeout + 1.0)
            if answer is None:
                ended = self._ended
                tail = self._tail()
                self._stop()
                if not ended:
                    return RunResult(success=False, outcome="timeout",
                                     error=f"the run did not return within {task.timeout:g} s")
                return RunResult(success=False, outcome="runner-died", error=tail or None)
            self.outbound += [str(a) for a in answer.get("outbound", ())]
            return RunResult.from_dict(answer["result"])

    def close(self) -> None:
        with self._lock:
            self._stop()
        shutil.rmtree(self._path, ignore_errors=True)

    def __enter__(self) -> IsolatedRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def requirements_of(spec: str) -> list[str] | None:
    """The runner module's ``REQUIREMENTS`` (its pins), if it names them."""
    import importlib

    module = importlib.import_module(spec.partition(":")[0])
    pins = getattr(module, "REQUIREMENTS", None)
    return None if pins is None else [str(p) for p in pins]


def _own_dependencies() -> list[str]:
    from importlib import metadata

    try:
        wanted = metadata.requires("agentturn") or []
    except metadata.PackageNotFoundError:
        return list(_OWN_DEPENDENCIES)
    return [r for r in wanted if "extra" not in r.partition(";")[2]]


def ensure_venv(folder: str | os.PathLike[str], requirements: Sequence[str],
                say: Any = None) -> pathlib.Path:
    """The python of the venv ``folder`` with ``requirements`` installed (made, or reused
    when its ``conform-requirements.txt`` names the same list)."""
    root = pathlib.Path(folder).resolve()
    python = root / "bin" / "python"
    wanted = "\n".join([*requirements, *_own_dependencies()]) + "\n"
    stamp = root / "conform-requirements.txt"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    if say is not None:
        say(f"conform: making {root} ({', '.join(requirements)})")
    stamp.unlink(missing_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True,
                       stdout=subprocess.DEVNULL)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    *wanted.split()], check=True, stdout=subprocess.DEVNULL)
    stamp.write_text(wanted)
    return python


# --- the child -------------------------------------------------------------------------------

#: The audit events that name a host (the index of the address in their arguments).
_ADDRESSED = {"socket.getaddrinfo": 0, "socket.gethostbyname": 0, "socket.gethostbyaddr": 0,
              "socket.connect": 1, "socket.sendto": 1, "socket.sendmsg": 1}
#: The audit events that start another program: it would carry no hook, so none may start.
_SPAWNS = ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
           "os.fork", "os.forkpty", "pty.spawn")


def loopback(host: object) -> bool:
    """Whether ``host`` is exactly a loopback address: an IPv4 address in 127.0.0.0/8,
    ``::1``, or the name ``localhost`` (no prefix of a longer name)."""
    import ipaddress

    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.partition("%")[0]).is_loopback
    except ValueError:
        return False


def _host(event: str, args: tuple[Any, ...]) -> tuple[bool, object]:
    """(whether ``event`` names a host, the host it names)."""
    where = _ADDRESSED.get(event)
    if where is None or len(args) <= where:
        return False, None
    address = args[where]
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        if isinstance(address, (str, bytes)) or address is None:
            return False, None  # a Unix socket's path (or sendmsg with no address)
        if isinstance(address, tuple) and address:
            return True, address[0]
        return False, None
    return True, address


def _guard(refused: list[str]) -> None:
    """Refuse (OSError, before it happens) and record every name lookup, connect or
    datagram that is not exactly loopback, and every program the child would start."""
    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_SPAWNS):
            refused.append(f"{event} {str(args[:2])[:120]} (a child process)")
            raise OSError(f"agentturn conform: {event} is refused (a child process would "
                          f"escape the guard)")
        names, host = _host(event, args)
        if not names or host is None or loopback(host):
            return
        shown = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host)
        refused.append(f"{event} {shown}")
        raise OSError(f"agentturn conform: {host!r} is beyond 127.0.0.1")

    sys.addaudithook(hook)


def main(argv: Sequence[str] | None = None) -> int:
    """The child: ``python -m agentturn.tools.conform.isolated pkg.mod:Name``."""
    from .protocol import load_runner

    args = list(sys.argv[1:] if argv is None else argv)
    # the protocol keeps the real stdout; whatever the runtime prints goes to stderr
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    refused: list[str] = []
    _guard(refused)

    def say(message: Mapping[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    try:
        runner = load_runner(args[0])
    except Exception as error:
        say({"error": f"{type(error).__name__}: {error}"})
        return 2
    say({"name": runner.name, "modes": [m.name for m in runner.modes]})
    for line in sys.stdin:
        task = Task.from_dict(json.loads(line)["task"])
        try:
            result = runner.run(task, HttpTools(task.tools_url))
            if not isinstance(result, RunResult):
                result = RunResult(success=False, outcome="runner-error",
                                   error=f"the runner returned {type(result).__name__}")
        except BaseException as error:  # what the runtime raised is what its caller got
            result = RunResult.raised(error)
        say({"result": result.to_dict(), "outbound": refused[:]})
        refused.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
