"""The stack's Kafka cluster, as its admin user: readiness checks and ACLs.

usage: kafka_admin.py ready N                        (node N answers and is a registered broker)
       kafka_admin.py in-sync                        (every partition has its full ISR)
       kafka_admin.py acls grant|revoke < ACLS.json  (`kubecast kafka-acls --format json`)
       kafka_admin.py acls list [PRINCIPAL]          (one JSON entry per line)

Run by `scripts/stack kafka-cluster`, which passes the cluster's address and the admin's
credentials in the environment. Uses the confluent-kafka client of the interop venv (the
Debian kcat's librdkafka 2.0 fails the SCRAM-SHA-512 login that newer ones pass).
"""

import json
import os
import re
import sys

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.BROKER,
    "transactional-id": ResourceType.TRANSACTIONAL_ID,
}
PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}


def admin(bootstrap=None):
    return AdminClient(
        {
            "bootstrap.servers": bootstrap or os.environ["KAFKA_CLUSTER_BOOTSTRAP"],
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": os.environ["KAFKA_CLUSTER_ADMIN"],
            "sasl.password": os.environ["KAFKA_CLUSTER_ADMIN_PASSWORD"],
        }
    )


def binding(entry, cls):
    kind = entry["resource_type"]
    if kind not in RESOURCES:
        sys.exit(f"kafka_admin.py: unknown resource_type {kind!r} in {entry}")
    return cls(
        RESOURCES[kind],
        entry["resource_name"],
        PATTERNS[entry["pattern_type"]],
        entry["principal"],
        entry.get("host", "*"),
        AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", entry["operation"]).upper()],
        AclPermissionType.ALLOW,
    )


def wait(futures):
    for what, future in futures.items():
        try:
            future.result(timeout=30)
        except Exception as e:  # the client's errors are of several classes
            sys.exit(f"kafka_admin.py: {what}: {e}")


def ready(node):
    """Node `node` answers on its own address and lists itself among the brokers."""
    address = os.environ["KAFKA_CLUSTER_BOOTSTRAP"].split(",")[node - 1]
    brokers = admin(address).list_topics(timeout=3).brokers
    return node in brokers


def in_sync():
    """Every partition's ISR holds all of its replicas."""
    topics = admin().list_topics(timeout=5).topics
    return all(
        len(p.isrs) == len(p.replicas) and p.leader >= 0
        for t in topics.values()
        for p in t.partitions.values()
    )


def acls(op, args, client):
    if op in ("grant", "revoke"):
        entries = json.load(sys.stdin)
        if op == "grant":
            wait(client.create_acls([binding(e, AclBinding) for e in entries]))
        else:
            wait(client.delete_acls([binding(e, AclBindingFilter) for e in entries]))
    elif op == "list":
        principal = args[0] if args else None
        found = client.describe_acls(
            AclBindingFilter(
                ResourceType.ANY,
                None,
                ResourcePatternType.ANY,
                principal,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ).result(timeout=30)
        names = {v: k for k, v in RESOURCES.items()}
        for b in found:
            print(
                json.dumps(
                    {
                        "principal": b.principal,
                        "resource_type": names.get(b.restype, str(b.restype)),
                        "resource_name": b.name,
                        "pattern_type": b.resource_pattern_type.name.lower(),
                        "operation": b.operation.name.title().replace("_", ""),
                    }
                )
            )
    else:
        sys.exit(__doc__)


def main():
    cmd, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    try:
        if cmd == "ready" and len(args) == 1:
            sys.exit(0 if ready(int(args[0])) else 1)
        if cmd == "in-sync":
            sys.exit(0 if in_sync() else 1)
    except Exception as e:  # not answering yet: the caller waits and asks again
        sys.exit(f"kafka_admin.py: {cmd}: {e}")
    if cmd == "acls" and args:
        acls(args[0], args[1:], admin())
    else:
        sys.exit(__doc__)


main()
