// A CloudEvents HTTP receiver built on the CloudEvents Go SDK (main.go); tests/http_*.rs
// send kubecast's HTTP sink to it.
module kubecast.local/stack/ce-receiver

go 1.26.0

require github.com/cloudevents/sdk-go/v2 v2.16.2

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.2 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.27.0 // indirect
)
