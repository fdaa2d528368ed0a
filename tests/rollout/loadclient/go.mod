module volume-health.example/rollout/loadclient

go 1.26.0
