"""OpenSSH from argv lists: how the controller reaches a rank, and how rank i reaches rank
i+1 over their shared link (``-b`` binds the client to rank i's address on that link).

OpenSSH hands the remote command to the remote user's login shell as one string
(``$SHELL -c``); ``remote_command`` quotes each argument so that the rank receives exactly
our argv whether that shell is POSIX (sh, dash, bash, zsh) or fish.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..core.bounded_lines import LineReader, keep_tail
from ..core.watchdog import Watchdog
from .agent_reply import SSH_FAILED, AgentReply, last_json
from .site import Hop, Rank, Site, SshOptions


def ssh_argv(
    options: SshOptions, target: str, remote: Sequence[str], *, bind: str | None = None
) -> list[str]:
    argv = [
        "ssh",
        "-T",
        "-e", "none",
        "-o", "BatchMode=yes",
        "-o", "Compression=no",
        "-o", "LogLevel=ERROR",
        "-o", f"StrictHostKeyChecking={options.strict_host_key_checking}",
        "-o", f"ConnectTimeout={options.connect_timeout}",
        "-o", f"ServerAliveInterval={options.server_alive_interval}",
        "-o", f"ServerAliveCountMax={options.server_alive_count_max}",
        "-p", str(options.port),
    ]
    if options.identity_file:
        argv += ["-i", options.identity_file, "-o", "IdentitiesOnly=yes"]
    if options.known_hosts_file:
        argv += ["-o", f"UserKnownHostsFile={options.known_hosts_file}"]
    for option in options.options:
        argv += ["-o", option]
    if options.cipher:
        argv += ["-c", options.cipher]
    if options.user and "@" not in target:
        argv += ["-l", options.user]
    if bind:
        argv += ["-b", bind]
    # "--": the target is never read as an option, whatever the site file says
    argv += ["--", target, remote_command(remote)]
    return argv


# A word the shells all read as written (shlex.quote's set less "=", which zsh expands at a
# word's start, and "%", which fish expands in "%self").
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_@+:,./-]+")
_ESCAPED_BACKSLASH = "\\\\"  # \\ outside quotes: one backslash to every shell


def remote_command(words: Sequence[str]) -> str:
    r"""``words`` as one command line that POSIX shells and fish parse back into ``words``:
    a plain word as it is; any other in single quotes, where neither reads anything, with
    each single quote written "'" and each backslash as \\ between quoted parts (fish, unlike
    POSIX, reads \\ and \' inside single quotes, so shlex.quote's 'a\' would go on there)."""
    return " ".join(word if _PLAIN_WORD.fullmatch(word) else
                    _ESCAPED_BACKSLASH.join("'" + part.replace("'", "'\"'\"'") + "'" for part in word.split("\\"))
                    for word in words)


def management_argv(site: Site, rank: Rank, agent_args: Sequence[str]) -> list[str]:
    return ssh_argv(site.ssh, rank.ssh, [*site.agent_for(rank), *agent_args])


def hop_argv(site: Site, hop: Hop, agent_args: Sequence[str]) -> list[str]:
    """Run on ``hop.sender``: reach the receiver at its address on the shared link."""
    return ssh_argv(
        site.ssh,
        hop.receiver_address,
        [*site.agent_for(hop.receiver), *agent_args],
        bind=hop.sender_address,
    )


REPLY_LIMIT = 16 << 20  # an agent's whole stdout: its longest reply (a plan of thousands of blobs) fits many times over
FIRST_REPLY_SECONDS = 300.0  # SSH, the interpreter, a stat of the rank's store: seconds, not minutes
_STDERR_LINES, _STDERR_LINE_LIMIT = 20, 4096  # what a failure shows of stderr: its last lines


class StartedAgent:
    """An agent started now that reads its input (stdin) later: its SSH session and
    interpreter start overlap whatever the controller does until ``finish``.

    What it writes is read within bounds, as a rank's agent may be of another version or
    damaged: stdout up to ``REPLY_LIMIT`` bytes in all (past that it is ended), stderr's
    last lines (a thread drains it, so a chatty stderr never blocks the agent)."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._stderr_tail: deque[bytes] = deque(maxlen=_STDERR_LINES)
        self._stderr_reader = threading.Thread(target=keep_tail, daemon=True,
                                               args=(self.process.stderr, self._stderr_tail, _STDERR_LINE_LIMIT))
        self._stderr_reader.start()
        assert self.process.stdout is not None
        self._stdout = LineReader(self.process.stdout, REPLY_LIMIT, total_limit=REPLY_LIMIT)
        # why the controller ended it before its reply, and the status that reply then has
        self._ended_because: tuple[str, int | None] | None = None

    def first_reply(self, timeout: float = FIRST_REPLY_SECONDS) -> AgentReply:
        """The first JSON object line the agent writes while it waits for its input (lines
        before it, such as a shell startup file's echo on the rank, are passed over); if it
        ends (or cannot be reached, or writes none within ``timeout`` seconds) before
        writing one, its status and stderr."""
        with self._deadline(timeout, f"no reply within {timeout:g}s"):
            for line in self._stdout_lines():
                parsed = last_json(line)
                if parsed is not None:
                    return AgentReply(0, parsed, "")
        return self._ended(None)

    def finish(self, input_text: str = "", timeout: float | None = None) -> AgentReply:
        """Write ``input_text`` and close stdin; the reply once the agent ends (ended by the
        controller after ``timeout`` seconds)."""
        writer = threading.Thread(target=self._write_input, args=(input_text.encode(),), daemon=True)
        writer.start()
        try:
            with self._deadline(timeout, f"timed out after {timeout}s"):
                lines = list(self._stdout_lines())
        except BaseException:  # interrupted while it runs: it does not outlive the controller's wait
            self.cancel()
            raise
        writer.join()
        return self._ended(last_json("".join(lines)))

    def kill(self) -> None:
        """End the agent (its SSH session) without reaping it: safe while another thread
        reads its output, which then ends."""
        if self.process.poll() is None:
            self.process.kill()

    def cancel(self) -> None:
        """End and reap it: not while another thread reads its output (``kill`` is for that)."""
        self.kill()
        self._reap()

    def _stdout_lines(self) -> Iterator[str]:
        """stdout's lines as text, until it ends or the agent is ended: past ``REPLY_LIMIT``
        bytes in all it is, and the rest is not read."""
        for raw in self._stdout:
            if self._ended_because is None:
                yield raw.decode("utf-8", "replace")
        if self._stdout.over:
            self._end(f"its output passed {REPLY_LIMIT} bytes", None)

    def _write_input(self, data: bytes) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(OSError):  # it ended before reading (BrokenPipeError): its output says why
            self.process.stdin.write(data)
        with contextlib.suppress(OSError):
            self.process.stdin.close()

    def _deadline(self, seconds: float | None, why: str) -> contextlib.AbstractContextManager[object]:
        """Ends the agent after ``seconds`` (a watchdog nobody feeds); None: no time limit. A
        time-out reads as the SSH failure it stands for, as OpenSSH's own ConnectTimeout does."""
        if seconds is None:
            return contextlib.nullcontext()
        return Watchdog(seconds, lambda: self._end(why, SSH_FAILED))

    def _end(self, why: str, returncode: int | None) -> None:
        """End the agent; its reply is then ``returncode`` (None: the status it ends with)."""
        if self._ended_because is None:
            self._ended_because = (why, returncode)
        self.kill()

    def _reap(self) -> int:
        returncode = self.process.wait()
        # its stderr ends with it, unless something it started keeps the pipe: not waited for
        self._stderr_reader.join(timeout=5)
        pipes = [self.process.stdin, self.process.stdout]
        if not self._stderr_reader.is_alive():
            pipes.append(self.process.stderr)
        for pipe in pipes:
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        return returncode

    def _ended(self, result: dict[str, Any] | None) -> AgentReply:
        """Its reply once its stdout ended: reaped, with stderr's last lines."""
        returncode = self._reap()
        stderr = b"".join(self._stderr_tail).decode("utf-8", "replace")
        if self._ended_because is not None:  # ended by the controller: what it wrote is no reply
            why, status = self._ended_because
            return AgentReply(returncode if status is None else status, None, f"{stderr}sparkflake: ended the agent: {why}\n")
        return AgentReply(returncode, result, stderr)


def start_agent(site: Site, rank: Rank, agent_args: Sequence[str]) -> StartedAgent:
    return StartedAgent(management_argv(site, rank, agent_args))


class AgentsOfARun:
    """The agents a run's worker threads start (an import, a commit, a rank's start or
    watch), so that an interrupt ends every one of them: once ``end_all`` was called, none
    is started any more (``ended``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._agents: list[StartedAgent] = []
        self.ended = False

    def adopt(self, agent: StartedAgent) -> StartedAgent:
        """Count ``agent`` (started before, as a settling agent is) among the run's."""
        with self._lock:
            self._agents.append(agent)
            if self.ended:
                agent.kill()
        return agent

    def begin(self, start: Callable[[], StartedAgent]) -> StartedAgent | None:
        """The agent ``start`` starts, counted among the run's; None, and nothing started,
        once the run was ended."""
        with self._lock:
            if self.ended:
                return None
            agent = start()
            self._agents.append(agent)
        return agent

    def run(self, site: Site, rank: Rank, agent_args: Sequence[str], input_text: str = "") -> AgentReply:
        """``run_agent``, unless the run was ended: then the reply of an agent never started."""
        agent = self.begin(lambda: start_agent(site, rank, agent_args))
        if agent is None:
            return AgentReply(SSH_FAILED, None, "sparkflake: not started: the run was interrupted\n")
        return agent.finish(input_text)

    def end_all(self) -> None:
        """End every agent of the run (without reaping it: the thread that waits for it does)."""
        with self._lock:
            self.ended = True
            agents = list(self._agents)
        for agent in agents:
            agent.kill()


def run_agent(
    site: Site,
    rank: Rank,
    agent_args: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float | None = None,
    within: AgentsOfARun | None = None,
) -> AgentReply:
    """Run an agent to its end; ``within``: one of a run's agents, ended with the others."""
    if within is not None:
        return within.run(site, rank, agent_args, input_text or "")
    return start_agent(site, rank, agent_args).finish(input_text or "", timeout=timeout)
