"""Opens a persistent MQTT 5 session and subscribes it at QoS 1, then disconnects.

The broker then keeps every matching message for the session while nobody is connected,
so that test_interop.py can collect them later with paho, after kubecast published them.

usage: mqtt_session.py HOST PORT CLIENT_ID FILTER
"""

import sys
import threading

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def main() -> int:
    host, port, client_id, topic_filter = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    subscribed = threading.Event()
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.on_connect = lambda c, *_: c.subscribe(topic_filter, qos=1)
    client.on_subscribe = lambda *_: subscribed.set()
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    client.connect(host, port, clean_start=False, properties=props)
    client.loop_start()
    ok = subscribed.wait(30)
    client.disconnect()
    client.loop_stop()
    if not ok:
        print(f"no SUBACK from {host}:{port} within 30s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
