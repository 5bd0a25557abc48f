// Package tracing builds the OpenTelemetry tracer provider of the worker
// binary from its worker.tracing settings (docs/tracing.md): spans are
// batched and exported over OTLP/HTTP to a collector, or written to a
// file as JSON lines. The libraries take any trace.TracerProvider
// (client.Config.TracerProvider, worker.Config.TracerProvider); only the
// binary needs this one.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Exporters Config.Exporter names.
const (
	// ExporterOTLP sends spans over OTLP/HTTP (protobuf) to Endpoint, or
	// where the OTEL_EXPORTER_OTLP_* environment variables say.
	ExporterOTLP = "otlp"
	// ExporterFile appends spans to File, one JSON object a line.
	ExporterFile = "file"
)

// Config is what the worker.tracing settings say.
type Config struct {
	// Exporter is "" (tracing off), ExporterOTLP or ExporterFile.
	Exporter string
	// Endpoint is the OTLP/HTTP URL, "" for the OTEL_EXPORTER_OTLP_*
	// environment variables' (default http://localhost:4318).
	Endpoint string
	// File is the path ExporterFile appends to.
	File string
}

// ErrOff is what New returns for a Config whose Exporter is "".
var ErrOff = errors.New("tracing: off")

// New returns the tracer provider cfg describes, for a process named
// service at version, and its shutdown, which flushes the spans not yet
// exported (call it once, when the process stops). It returns ErrOff
// when cfg turns tracing off.
func New(ctx context.Context, cfg Config, service, version string) (trace.TracerProvider, func(context.Context) error, error) {
	var exp sdktrace.SpanExporter
	var closeFile func() error
	switch cfg.Exporter {
	case "":
		return nil, nil, ErrOff
	case ExporterOTLP:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(tracesURL(cfg.Endpoint)))
		}
		e, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("tracing: otlp exporter: %w", err)
		}
		exp = e
	case ExporterFile:
		f, err := os.OpenFile(cfg.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("tracing: %w", err)
		}
		e, err := stdouttrace.New(stdouttrace.WithWriter(f))
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("tracing: file exporter: %w", err)
		}
		exp, closeFile = e, f.Close
	default:
		return nil, nil, fmt.Errorf("tracing: unknown exporter %q (want %q or %q)", cfg.Exporter, ExporterOTLP, ExporterFile)
	}
	// The environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
	// overrides the service's name.
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName(service), semconv.ServiceVersion(version)), resource.Environment())
	if err != nil {
		res = resource.Environment()
	}
	// The SDK's sampler: OTEL_TRACES_SAMPLER's, by default parent-based
	// (a task's trace is sampled where its producer decided) and always on
	// for a task without one.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, func(ctx context.Context) error {
		err := tp.Shutdown(ctx)
		if closeFile != nil {
			err = errors.Join(err, closeFile())
		}
		return err
	}, nil
}

// tracesURL returns the URL spans are sent to for a collector's URL u:
// u itself when it names a path, else u's /v1/traces, as
// OTEL_EXPORTER_OTLP_ENDPOINT is read (the exporter would post to "/").
func tracesURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Path != "" && p.Path != "/") {
		return u
	}
	p.Path = "/v1/traces"
	return p.String()
}
