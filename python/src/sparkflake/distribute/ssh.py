"""OpenSSH from argv lists: how the controller reaches a rank, and how rank i reaches rank
i+1 over their shared link (``-b`` binds the client to rank i's address on that link).

OpenSSH hands the remote command to the remote user's shell as one string; each argument
is quoted with ``shlex.quote`` so the remote side receives exactly our argv.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

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
    argv += ["--", target, shlex.join(remote)]
    return argv


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


class StartedAgent:
    """An agent started now that reads its input (stdin) later: its SSH session and
    interpreter start overlap whatever the controller does until ``finish``."""

    def __init__(self, argv: list[str]) -> None:
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, encoding="utf-8", errors="replace")

    def first_reply(self) -> AgentReply:
        """The first JSON object line the agent writes while it waits for its input (lines
        before it, such as a shell startup file's echo on the rank, are passed over); if it
        ends (or cannot be reached) before writing one, its whole reply."""
        assert self.process.stdout is not None
        passed_over = []
        for line in self.process.stdout:
            parsed = last_json(line)
            if parsed is not None:
                return AgentReply(0, parsed, "")
            passed_over.append(line)
        # Its stdout ended: what it wrote is read already (communicate reads the pipe, not this
        # stream's buffer, so it would not see it); communicate gives the rest, and the status.
        _, stderr = self.process.communicate()
        return AgentReply(self.process.returncode, last_json("".join(passed_over)), stderr)

    def finish(self, input_text: str = "", timeout: float | None = None) -> AgentReply:
        try:
            stdout, stderr = self.process.communicate(input_text, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            self.cancel()
            return AgentReply(SSH_FAILED, None, f"timed out after {exc.timeout}s")
        except BrokenPipeError:  # it ended before reading: its output says why
            stdout, stderr = self.process.communicate()
        return AgentReply(self.process.returncode, last_json(stdout), stderr)

    def kill(self) -> None:
        """End the agent (its SSH session) without reaping it: safe while another thread
        reads its output, which then ends."""
        if self.process.poll() is None:
            self.process.kill()

    def cancel(self) -> None:
        if self.process.returncode is not None:
            return  # finished already
        self.process.kill()
        self.process.communicate()


def start_agent(site: Site, rank: Rank, agent_args: Sequence[str]) -> StartedAgent:
    return StartedAgent(management_argv(site, rank, agent_args))


def run_agent(
    site: Site,
    rank: Rank,
    agent_args: Sequence[str],
    *,
    input_text: str | None = None,
    timeout: float | None = None,
) -> AgentReply:
    return start_agent(site, rank, agent_args).finish(input_text or "", timeout=timeout)
