"""One service at a time: which recorded runs a portrait is of.

A folder may hold several services -- the server, a batch scorer, the load client that drove the
server (data/<host>/<service>/<run>/). Their arrivals merged into one curve describe nothing, so
``choose`` refuses several services in one line that names them and the way to choose (``service``
/ ``--service``, or ``--each-service``). The load client's recording (``loadprobe load --record``)
is not a service of its own next to the server it loaded: it is the same requests seen from the
other side, recognised by the request ids the two share, and joined to that service
(``requestjoin.py``). A load client that shares no request id with the chosen service is left out
when a service was named, and refused as a second service when none was.

Usage::

    runs, clients = choose(runs, service=None, where="data/")   # LoadprobeError: several services
    for name in each_service(runs): ...                          # --each-service: one portrait each
"""

from __future__ import annotations

from .._errors import LoadprobeError, listed
from .dataset import Run, describe_skipped, file_refs, name_matches
from .reading import UnreadableFile, read_data_file, read_request_ids
from .requestjoin import client_requests, is_load_client
from ..schema import LOAD_CLIENT_SERVICE

HOW = ("choose one with --service NAME (service=NAME in Python), or write one portrait per service "
       "with --each-service (loadprobe analyze; recommend, simulate and report read the portrait.json it writes)")


def choose(runs: list[Run], service: str | None, where: str,
           how: str = f"a portrait is of one service: {HOW}") -> tuple[list[Run], list[Run]]:
    """(the runs to analyse, those of them that are the load client's and join the service's requests).

    ``service``: an fnmatch pattern that must match exactly one service (the load client aside);
    None: the runs must hold one. Raises LoadprobeError naming the services found otherwise, and ``how``
    to choose."""
    clients = [run for run in runs if is_load_client(run.service)]
    others = [run for run in runs if not is_load_client(run.service)]
    found = sorted({run.service for run in others})
    chosen = [run for run in others if not service or name_matches(run.service, service)]
    names = sorted({run.service for run in chosen})
    if not names:
        if clients and (not service or name_matches(LOAD_CLIENT_SERVICE, service)):
            return clients, []  # the load client's view alone
        raise LoadprobeError(f"{where}: no loadprobe data for --service {service!r} (services recorded here: "
                             f"{listed(found + ([LOAD_CLIENT_SERVICE] if clients else []), 8)}); give one of them")
    if len(names) > 1:
        what = f"--service {service!r} matches" if service else "holds"
        raise LoadprobeError(f"{where} {what} {len(names)} services ({listed(names, 8)}); {how}")
    joined = [client for client in clients if shares_requests(client, chosen)]
    strangers = [client for client in clients if client not in joined]
    if strangers and not service:
        raise LoadprobeError(f"{where} holds {names[0]} and a load client's recording ({strangers[0].run_dir}) that "
                             f"shares no request id with it, so they are two services; {how} (a server that "
                             "records the x-request-id header joins the client's requests)")
    return chosen + joined, joined


def each_service(runs: list[Run], service: str | None = None) -> list[str]:
    """The services to give a portrait each (--each-service): every service (matching ``service``),
    and the load client's name when some of its recording shares no request id with any of them."""
    names = sorted({run.service for run in runs if not is_load_client(run.service)
                    and (not service or name_matches(run.service, service))})
    clients = [run for run in runs if is_load_client(run.service)]
    alone = [client for client in clients
             if not any(shares_requests(client, [run for run in runs if run.service == name]) for name in names)]
    if alone and (not service or name_matches(LOAD_CLIENT_SERVICE, service) or not names):
        names.append(LOAD_CLIENT_SERVICE)
    return names


def shares_requests(client: Run, runs: list[Run]) -> bool:
    """Whether any span of ``runs`` carries a request id the load client's run sent: it read the
    request-id column of their span files until the first one that does (the server's first file)."""
    sent = client_requests([client])
    if sent is None:
        return False
    for ref in file_refs(runs):
        if ref.kind != "spans":
            continue
        try:
            ids = read_request_ids(ref)
        except UnreadableFile:
            continue  # the map step skips it, and says why
        if (sent.find(ids) >= 0).any():
            return True
    return False


def recorded_service(paths, service: str | None = None, *, how: str) -> tuple[list[Run], list[Run]]:
    """(the service's own runs, the load client's runs of the same requests) under ``paths``, by ``choose``'s
    rule: what a replay (the client's view when there is one: each request once, as sent) or a verify (the
    service's own spans) reads; ``how`` says how to choose where there are several. A folder of the load client
    alone is that service."""
    from .dataset import discover

    runs, _ = discover(paths)
    chosen, clients = choose(runs, service, ", ".join(map(str, paths)), how)
    return [run for run in chosen if run not in clients], clients


def span_tables(runs: list[Run], skipped: dict[str, str] | None = None):
    """Each readable spans file of ``runs`` as a table, run by run; one that cannot be read is passed over, as
    the analysis passes it over, and its path and why go into ``skipped`` (for ``unreadable``)."""
    for ref in file_refs(runs):
        if ref.kind != "spans":
            continue
        try:
            yield read_data_file(ref).table
        except UnreadableFile as exc:
            if skipped is not None:
                skipped[exc.path] = exc.reason


def unreadable(skipped: dict[str, str]) -> str:
    """What a reader that found no spans says of the files it passed over ('' when none): they may be why."""
    return f" (passed over: {describe_skipped(skipped)})" if skipped else ""
