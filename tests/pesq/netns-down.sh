#!/usr/bin/env bash
for n in pq-a pq-m pq-b; do ip netns pids $n 2>/dev/null | xargs -r kill 2>/dev/null; done
sleep 0.3
for n in pq-a pq-m pq-b; do ip netns del $n 2>/dev/null || true; done
