"""Scrapes a Prometheus endpoint and prints its samples as JSON lines.

Parsed by prometheus_client, the Prometheus project's own Python client, so
the test checks the exposition format as Prometheus reads it.
Usage: scrape.py URL
"""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

with urllib.request.urlopen(sys.argv[1], timeout=10) as answer:
    text = answer.read().decode()
for family in text_string_to_metric_families(text):
    for sample in family.samples:
        print(json.dumps({"family": family.name, "type": family.type,
                          "name": sample.name, "labels": sample.labels, "value": sample.value}))
