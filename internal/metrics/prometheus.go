package metrics

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// PrometheusContentType is the content type of the Prometheus text exposition format 0.0.4.
const PrometheusContentType = "text/plain; version=0.0.4; charset=utf-8"

// WritePrometheus writes every series of Collect in the Prometheus text exposition format (version 0.0.4):
// one HELP and TYPE line per metric, per-group series labelled group and platform, counters cumulative.
func (r *Registry) WritePrometheus(w io.Writer) error {
	samples := r.Collect()
	byName := map[string][]Sample{}
	for _, s := range samples {
		byName[s.Name] = append(byName[s.Name], s)
	}
	bw := bufio.NewWriter(w)
	for _, d := range definitions {
		series := byName[d.Name]
		if len(series) == 0 {
			continue
		}
		typ := "gauge"
		if d.Kind == Counter {
			typ = "counter"
		}
		bw.WriteString("# HELP " + d.Prometheus + " " + escapeHelp(d.Help) + " (CloudWatch " + Namespace + "/" + d.Name + ")\n")
		bw.WriteString("# TYPE " + d.Prometheus + " " + typ + "\n")
		for _, s := range series {
			bw.WriteString(d.Prometheus)
			var labels []string
			if s.Group != "" {
				labels = append(labels, `group="`+escapeLabel(s.Group)+`"`, `platform="`+escapeLabel(s.Platform)+`"`)
			}
			if s.Reason != "" {
				labels = append(labels, `reason="`+escapeLabel(s.Reason)+`"`)
			}
			if len(labels) > 0 {
				bw.WriteString("{" + strings.Join(labels, ",") + "}")
			}
			bw.WriteString(" " + strconv.FormatFloat(s.Value, 'g', -1, 64) + "\n")
		}
	}
	return bw.Flush()
}

// Handler serves WritePrometheus on GET (for /metrics).
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", PrometheusContentType)
		_ = r.WritePrometheus(w)
	})
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
