"""The checks: each a short stable id, the endpoint, its parameters and how its answer is
normalised. Times are given in seconds relative to the anchor (the end of the data's hour) and
made absolute when the check is sent. Ids are what docs/grafana.md lists, so never renumber:
add new ids instead.

A check is a dict:
  id       the id
  path     the endpoint, under /loki/api/v1/ (or `tail`)
  params   [(name, value)]; a value that is a Rel(...) is a time relative to the anchor
  norm     how to normalise the answer: query, data, body, tail
  tenant   X-Scope-OrgID (default team-a)
  headers  more request headers
"""

from data import TENANT_A, TENANT_B

HOUR = 3600


class Rel:
    """A time `seconds` after the anchor (negative: before), sent as Unix nanoseconds."""

    def __init__(self, seconds):
        self.seconds = seconds

    def ns(self, anchor_ns):
        return str(anchor_ns + int(self.seconds * 10**9))


START, END = Rel(-HOUR), Rel(0)
CHECKS = []


def add(check_id, path, params, norm="query", tenant=TENANT_A, headers=None, **more):
    if any(c["id"] == check_id for c in CHECKS):
        raise ValueError(f"duplicate check id {check_id}")
    CHECKS.append({"id": check_id, "path": path, "params": params, "norm": norm,
                   "tenant": tenant, "headers": headers or {}, **more})


def logs(check_id, query, limit="1000", start=START, end=END, direction=None, tenant=TENANT_A):
    """A log query over the data's hour (query_range)."""
    params = [("query", query), ("start", start), ("end", end)]
    if limit is not None:
        params.append(("limit", limit))
    if direction:
        params.append(("direction", direction))
    add(check_id, "query_range", params, tenant=tenant)


def metric(check_id, query, step="60s", start=START, end=END, tenant=TENANT_A, headers=None):
    """A metric range query (query_range)."""
    params = [("query", query), ("start", start), ("end", end)]
    if step is not None:
        params.append(("step", step))
    add(check_id, "query_range", params, tenant=tenant, headers=headers)


def instant(check_id, query, at, tenant=TENANT_A, limit=None):
    """An instant query (query) at `at` seconds from the anchor."""
    params = [("query", query), ("time", Rel(at))]
    if limit:
        params.append(("limit", limit))
    add(check_id, "query", params, tenant=tenant)


ALL = '{service_name=~".+"}'
CHECKOUT = '{service_name="checkout"}'
PROD = '{service_name="checkout", env="prod"}'
STAGING = '{service_name="checkout", env="staging"}'
PAYMENTS = '{service_name="payments"}'
PAY_DEBUG = '{service_name="payments", level="debug"}'
PROXY = '{service_name="proxy"}'
SEARCH = '{service_name="search"}'
QUIRKS = '{service_name="quirks"}'

# ---- stream selectors --------------------------------------------------------------------------
logs("sel_service", CHECKOUT)
logs("sel_service_level", '{service_name="checkout", level="error"}')
logs("sel_regex", '{service_name=~"check.*|pay.*"}')
logs("sel_label_neq", '{service_name="checkout", env!="prod"}')
logs("sel_level_nre", '{service_name=~".+", level!~"info|debug"}')
logs("sel_job_only", '{job="cron"}')
logs("sel_label_regex", '{env=~"dev|stag.*"}', limit="100")
logs("sel_service_from_job", '{service_name="cron"}')
logs("sel_app", '{app="frontend"}')
logs("sel_level_warning", '{level="warning"}')
logs("sel_env", '{env="prod"}')
logs("sel_unknown_service", '{service_name="unknown_service"}')
logs("sel_host", '{host="h1"}')
logs("sel_structured_metadata", '{trace_id="tr001"}')
logs("sel_sm_with_service", '{service_name="search", shard="1"}')
logs("sel_all", ALL)
logs("sel_precise_ns", '{service_name="precise"}')
logs("sel_region", '{region="eu"}')
logs("sel_label_empty", '{service_name="payments", level=""}')
logs("sel_no_match", '{service_name="nope"}')
logs("sel_level_regex", '{service_name="checkout", level=~"warn|error"}')

# ---- limits, directions and windows ------------------------------------------------------------
logs("page_backward_10", PROXY, limit="10")
logs("page_forward_10", PROXY, limit="10", direction="forward")
logs("page_default_limit", '{service_name="checkout", level="info"}', limit=None)
logs("page_forward_all", CHECKOUT, direction="forward")
logs("page_window", CHECKOUT, start=Rel(-1800), end=Rel(-1200))
logs("page_window_on_minutes", CHECKOUT, start=Rel(-HOUR + 15 * 60), end=Rel(-HOUR + 30 * 60))
logs("page_limit_over_5000", CHECKOUT, limit="6000")
logs("tenant_b_service", CHECKOUT, tenant=TENANT_B)
logs("tenant_b_all", ALL, tenant=TENANT_B)
logs("tenant_b_metadata", '{service_name="billing"}', tenant=TENANT_B)
logs("tenant_b_only_a_service", PAYMENTS, tenant=TENANT_B)

# ---- line filters ------------------------------------------------------------------------------
logs("lf_contains", CHECKOUT + ' |= "failed"')
logs("lf_not_contains", CHECKOUT + ' != "cache"')
logs("lf_regex", PROXY + ' |~ "GET|POST"')
logs("lf_not_regex", ALL + ' !~ "^\\\\{"')
logs("lf_empty", PAYMENTS + ' |= ""')
logs("lf_case_insensitive", ALL + ' |~ "(?i)warn"')
logs("lf_chain", CHECKOUT + ' |= "request" != "slow" |~ "status\\":5"')
logs("lf_or", PROXY + ' |= "POST" or "PUT"')
logs("lf_backtick", PROXY + ' |= `"GET /health`')
logs("lf_ip", PROXY + ' |= ip("10.0.1.0/24")')
logs("lf_anchored_regex", PROXY + ' |~ "^10\\\\.0\\\\.2\\\\."')

# ---- json --------------------------------------------------------------------------------------
logs("json_all", PROD + " | json")
logs("json_status_5xx", PROD + " | json | status >= 500")
logs("json_error_empty", PAYMENTS + ' | json | __error__=""')
logs("json_error_only", PAYMENTS + ' | json | __error__!=""')
logs("json_nested", CHECKOUT + ' | json | user_name="ann"')
logs("json_params", CHECKOUT + ' | json code="status", who="user.name"')
logs("json_duration", PROD + " | json | duration > 1s")
logs("json_number_size", PROD + " | json | bytes > 20KB")
logs("json_or", PROD + " | json | status = 500 or status = 404")
logs("json_label_regex", PROD + ' | json | path=~"/api/.*"')
logs("json_drop", PROD + " | json | drop user_name, seq")
logs("json_keep", PROD + " | json | keep status, service_name")
logs("json_line_format", PROD + ' | json | line_format "{{.method}} {{.path}} {{.status}}"')
logs("json_line_format_line", PROD + ' | json | line_format "{{.status}}: {{__line__}}"')
logs("json_on_plain", PROXY + " | json")
logs("json_error_name", ALL + ' | json | __error__="JSONParserErr"')
logs("json_level_collision", PAYMENTS + " | json")
logs("json_then_filter_line", PROD + ' | json | status="200" |= "cache"')

# ---- logfmt ------------------------------------------------------------------------------------
logs("logfmt_all", STAGING + " | logfmt")
logs("logfmt_payments", PAYMENTS + " | logfmt")
logs("logfmt_status", PAY_DEBUG + " | logfmt | status >= 500")
logs("logfmt_duration", PAY_DEBUG + " | logfmt | duration >= 250ms")
logs("logfmt_size", PAY_DEBUG + " | logfmt | size > 10KB")
logs("logfmt_and_parens", PAY_DEBUG + ' | logfmt | (status = 200 or status = 201) and method = "GET"')
logs("logfmt_comma", PAY_DEBUG + ' | logfmt | method="GET", status < 300')
logs("logfmt_error", PAY_DEBUG + ' | logfmt | __error__ != ""')
logs("logfmt_line_format", PAY_DEBUG + ' | logfmt | line_format "{{.method}} {{.path}}"')
logs("logfmt_drop_error", PAYMENTS + " | logfmt | drop __error__")
logs("logfmt_keep", PAY_DEBUG + " | logfmt | keep method, status")
logs("logfmt_drop_matching", PAY_DEBUG + ' | logfmt | drop method="GET"')
logs("logfmt_not_a_number", PAY_DEBUG + " | logfmt | path > 5")
logs("logfmt_strict", PAY_DEBUG + " | logfmt --strict")
logs("logfmt_tenant_b", '{service_name="billing"} | logfmt', tenant=TENANT_B)
logs("logfmt_label_neq", PAY_DEBUG + ' | logfmt | method != "GET"')
logs("logfmt_on_json", PROD + " | logfmt")

# ---- stages loghaul refuses today --------------------------------------------------------------
logs("stage_regexp", PROXY + ' | regexp `(?P<ip>\\S+) - - "(?P<method>\\S+) (?P<path>\\S+)`')
logs("stage_pattern", PROXY + ' | pattern `<ip> - - "<method> <path> <_>" <status> <size> <_>`')
logs("stage_label_format", PAY_DEBUG + " | logfmt | label_format code=status")
logs("stage_line_format_func", PROD + ' | json | line_format "{{ .method | ToLower }}"')
logs("stage_decolorize", PROXY + " | decolorize")
logs("stage_unpack", PROD + " | unpack")

# ---- the stages above, behaviour by behaviour ---------------------------------------------------
EDGE = '{service_name="edge"}'
logs("lf_not_contains_or", CHECKOUT + ' != "cache" or "slow"')
logs("lf_regex_or", PROXY + ' |~ "POST" or "PUT"')
logs("lf_ip_not_range", PROXY + ' != ip("10.0.0.0-10.0.1.255")')
logs("lf_ip_v6_cidr", EDGE + ' |= ip("2001:db8::/32")')
logs("lf_ip_v6_range", EDGE + ' |= ip("2001:db8::1-2001:db8::ff")')
logs("lf_ip_or_text", EDGE + ' |= "fe80" or ip("10.1.2.3")')
logs("lf_pattern", PROXY + ' |> "<_> - - \\"GET <_>\\" 200 <_>"')
logs("lf_pattern_or", PROXY + ' |> "10.0.1.<_>" or "<_> 404 <_>"')
logs("lf_pattern_not", PROXY + ' !> "<_> \\"GET <_>" or "<_> 500 <_>"')
logs("lf_pattern_then_json", CHECKOUT + ' |> "{<_>\\"status\\":50<_>" | json | method="GET"')
metric("lf_pattern_count", 'sum by (level) (count_over_time({service_name=~".+"} |> "<_> took <_>ms<_>" [10m]))',
       step="600s")
add("lf_pattern_named_refused", "query_range", [("query", PROXY + ' |> "<ip> <_>"'), ("start", START),
                                                ("end", END)])
logs("label_ip", PROXY + ' | pattern "<ip> <_>" | ip = ip("10.0.2.0/23")')
logs("label_ip_not", PROXY + ' | pattern "<ip> <_>" | ip != ip("10.0.0.0/24")')
logs("stage_regexp_no_match", PROXY + ' | regexp "(?P<method>POST|PUT) (?P<path>\\\\S+)"')
logs("stage_pattern_literal_start", PROXY + ' | pattern `10.0.1.<host> - - "<method> <_>`')
logs("stage_line_format_default", PAY_DEBUG + ' | logfmt | line_format `{{ default "none" .user }} '
     '{{ .method | lower }} {{ if eq .status "500" }}FAIL{{ else if hasPrefix "2" .status }}ok'
     '{{ else }}other{{ end }}`')
logs("stage_line_format_funcs", PROXY + ' | pattern `<ip> - - "<method> <path> <_>" <status> <size> <_>` '
     '| line_format `{{ .path | trimPrefix "/api" | upper }} {{ printf "%5s|%-6s|" .status .method }} '
     '{{ add .size 1 }} {{ regexReplaceAll "[.]" .ip "_" }} {{ .ip | trunc 6 }} {{ __line__ | substr 0 4 }}`')
logs("template_date", PROXY + ' | line_format `{{ __timestamp__ | date "2006-01-02T15:04:05.000000Z07:00 Mon Jan _2 3PM .999" }} '
     '{{ unixToTime "1700000000123" }} {{ __timestamp__ }} {{ date "15:04" (int "3600") }}`')
logs("template_unix_to_time_error", CHECKOUT + ' | json | line_format `{{ unixToTime .status }}`')
logs("stage_label_format_template", PAY_DEBUG + ' | logfmt | label_format route="{{.method}} {{.path}}", '
     'code=status | keep route, code')
logs("stage_unpack_packed", EDGE + " | unpack")
logs("stage_decolorize_ansi", EDGE + " | decolorize")
logs("stage_unpack_decolorize", EDGE + ' | unpack | decolorize | pattern "<method> <path> from <client> took <_>"')
logs("json_params_nested", PROD + ' | json first_tag="tags[0]", who="user", ratio, missing="no.such"')
logs("logfmt_params", PAY_DEBUG + ' | logfmt m="method", status')
logs("logfmt_strict_errors", PAYMENTS + " | logfmt --strict | drop level, level_extracted")
logs("logfmt_keep_empty", EDGE + " | decolorize | logfmt --keep-empty")
logs("keep_matching", PAY_DEBUG + ' | logfmt | keep method="GET", path')
# A second parser overwrites what an earlier stage set, and suffixes only the line's own labels.
logs("parser_twice_json", PROD + ' | json | json | trace_id!=""')
# A parser after a parser, a drop or a keep: what a stage set once is not taken again; a parser
# that takes some keys starts them empty and stops at a label it already took as `_extracted`.
logs("parser_twice_logfmt_fields", PAY_DEBUG + " | logfmt | logfmt method, level")
logs("parser_fields_renamed_twice", PAY_DEBUG + ' | logfmt m="method" | logfmt m="path", status')
logs("parser_after_dropping_parsed", PAY_DEBUG + " | logfmt | drop method | logfmt")
logs("parser_after_keep", PAY_DEBUG + " | logfmt | keep method, path | logfmt")
logs("parser_after_rename", PAY_DEBUG + " | logfmt | label_format m=method | logfmt")
logs("json_params_over_earlier", PROD + ' | json | json method="path", user_name="missing"')
# A number filter: a line without the label fails it, a line a stage already failed on passes as
# it is, and an empty label is text that is no number.
logs("number_filter_empty_label", QUIRKS + " | json | e > 1 or n > 1")
logs("number_filter_after_error", PAYMENTS + ' | json | label_format amt="{{.amount}}" | amt > 100')
logs("number_filter_text_label", PAYMENTS + " | json | msg > 1s")
# The error's details are no label to a filter, a rename or a template of one label alone.
logs("error_details_filtered", PAYMENTS + ' | json | __error_details__ != ""')
logs("error_details_renamed", PAYMENTS + " | json | label_format d=__error_details__, e=__error__")
logs("error_details_line_alone", PAYMENTS + ' | json | line_format "{{ .__error_details__ }}"')
logs("error_details_line_with", PAYMENTS + ' | json | line_format "{{.__error__}}: {{.__error_details__}}"')
# A key given twice: the first label of a name is kept, in the line's order.
logs("json_repeated_keys", QUIRKS + " | json")
logs("json_params_repeated_keys", QUIRKS + ' | json x="a", y="a.b", z="k"')
metric("json_repeated_keys_by", "sum by (a, a_b, k) (count_over_time(" + QUIRKS + " | json [10m]))",
       step="600s")
logs("parser_twice_logfmt", STAGING + " | logfmt | logfmt")
logs("parser_after_label_format", PROD + ' | json | label_format msg="{{.method}}" | json')
logs("parser_after_drop", STAGING + " | drop level | logfmt")
logs("template_bytes", STAGING + ' | logfmt | line_format "{{.size}} {{ .size | bytes }} {{ bytes .bytes }}"')
logs("template_bytes_units", PROD + ' | json | line_format `{{ bytes "1,5 k" }} {{ bytes "2 KiB" }} {{ bytes "3.7" }} {{ .bytes | bytes }}`')
logs("template_bytes_error", PROD + ' | json | line_format `{{ bytes "7 zz" }}`')
metric("m_pattern_by_method", 'sum by (method) (count_over_time(' + PROXY
       + ' | pattern `<_> - - "<method> <_>` [5m]))')
metric("m_unpack_by_pod", 'sum by (pod) (count_over_time(' + EDGE + ' |= "_entry" | unpack [10m]))')
metric("m_ip_or_rate", 'sum(rate(' + PROXY + ' |= ip("10.0.0.0/24") or "POST" [5m]))')
add("format_query_long", "format_query",
    [("query", PROD + ' |= "request" or "cache" != "slow" | json | decolorize | label_format route="{{.method}} '
      '{{.path}}" | drop user_name="ann", seq | line_format "{{ .route | lower }}"')], norm="data")
add("format_query_stages", "format_query",
    [("query", '{service_name="proxy"} != "a" or "b" | pattern "<ip> <_>" | ip=ip("10.0.0.0/8")')], norm="data")

# ---- instant log query -------------------------------------------------------------------------
instant("instant_log", CHECKOUT, -600, limit="1000")

# ---- metric queries ----------------------------------------------------------------------------
metric("m_count_sum", f"sum(count_over_time({CHECKOUT}[5m]))")
metric("m_count_streams", f"count_over_time({CHECKOUT}[5m])")
metric("m_count_by_level", f"sum by (level) (count_over_time({ALL}[5m]))")
metric("m_rate", f"rate({PROXY}[1m])")
metric("m_rate_by_service", f"sum by (service_name) (rate({ALL}[5m]))")
metric("m_bytes", 'bytes_over_time({service_name="checkout", level="error"}[10m])')
metric("m_bytes_rate", f"sum(bytes_rate({CHECKOUT}[5m]))")
metric("m_avg_by", f"avg by (env) (count_over_time({CHECKOUT}[5m]))")
metric("m_min", f"min(count_over_time({ALL}[10m]))")
metric("m_max_by", f"max by (service_name) (count_over_time({ALL}[10m]))")
metric("m_count", f"count(count_over_time({ALL}[10m]))")
metric("m_topk", f"topk(2, sum by (service_name) (count_over_time({ALL}[10m])))")
metric("m_bottomk", f"bottomk(1, sum by (service_name) (count_over_time({ALL}[10m])))")
metric("m_without", f"sum without (env) (count_over_time({CHECKOUT}[5m]))")
metric("m_step_30s", f"sum(count_over_time({PROXY}[1m]))", step="30s")
metric("m_step_90s", f"sum(count_over_time({PROXY}[1m]))", step="90s")
metric("m_step_240s_50m", f"sum by (level) (count_over_time({CHECKOUT}[5m]))", step="240s", start=Rel(-3000))
metric("m_step_9s_10m", f"sum(count_over_time({ALL}[30s]))", step="9s", start=Rel(-1500), end=Rel(-900))
metric("m_step_seconds_number", f"sum(count_over_time({PROXY}[2m]))", step="120")
metric("m_default_step", f"sum(count_over_time({PROXY}[1m]))", step=None, start=Rel(-2700))
metric("m_range_90s", f"sum(count_over_time({PROXY}[90s]))")
metric("m_range_1h", f"sum by (service_name) (count_over_time({ALL}[1h]))", step="300s")
metric("m_step_equal_range", f"sum(count_over_time({ALL}[5m]))", step="300s")
metric("m_volume_query", f"sum by (level, detected_level) (count_over_time({ALL} | drop __error__ [1m]))")
metric("m_volume_query_service", 'sum by (level, detected_level) (count_over_time({service_name="checkout"} | drop __error__ [1m]))')
metric("m_volume_hist_90s", f"sum by (level, detected_level) (count_over_time({ALL} | drop __error__ [90s]))",
       step="90s", headers={"X-Query-Tags": "Source=logvolhist"})
metric("m_volume_hist_60s", f"sum by (level, detected_level) (count_over_time({ALL} | drop __error__ [1m]))",
       headers={"X-Query-Tags": "Source=logvolhist"})
metric("m_json_by_status", f"sum by (status) (count_over_time({PROD} | json [10m]))")
metric("m_json_error_by", f"sum by (msg) (count_over_time({PAYMENTS} | json [10m]))")
metric("m_json_error_sum_all", f"sum(count_over_time({PAYMENTS} | json [10m]))")
metric("m_json_error_filtered", f'sum by (msg) (count_over_time({PAYMENTS} | json | __error__="" [10m]))')
metric("m_logfmt_by_method", f"sum by (method) (rate({PAY_DEBUG} | logfmt [5m]))")
metric("m_line_filter", f'sum(count_over_time({PROXY} |= "GET" [5m]))')
metric("m_count_by_sm", f"sum by (trace_id) (count_over_time({SEARCH}[1h]))", step="600s")
metric("m_count_by_job", 'sum by (job) (count_over_time({job="cron"}[10m]))')
# Stream label patterns (SQLite narrows them by its stream catalog), across services.
metric("m_label_regex_by_env", 'sum by (env) (count_over_time({env=~"prod|dev"}[10m]))')
metric("m_label_regex_ci", 'sum(count_over_time({job=~"(?i)CRON|nightly"}[10m]))')
# A sum of everything counts lines whatever the stages that only make labels make of them.
metric("m_sum_all_logfmt_strict", f"sum(count_over_time({PAYMENTS} | logfmt --strict [10m]))")
metric("m_sum_all_regexp_drop",
       "sum(bytes_over_time(" + PAYMENTS + ' | regexp "order=(?P<order>[0-9]+)" | drop order [10m]))')
metric("m_sum_all_pattern_keep", "sum(rate(" + PROXY + ' | pattern "<ip> <_>" | keep ip |= "GET" [5m]))')
metric("m_sum_all_json_logfmt", f"sum(count_over_time({ALL} | json | logfmt [10m]))")
metric("m_sum_all_json_fields", f'sum(bytes_rate({PAYMENTS} | json o="order", m="msg" [5m]))')
metric("m_by_detected_level", f"sum by (detected_level) (count_over_time({ALL}[10m]))")
metric("m_precise_ns", 'count_over_time({service_name="precise"}[1m])')
metric("m_avg_without", f"avg without (level) (count_over_time({CHECKOUT}[10m]))")
metric("m_tenant_b", f"sum by (service_name) (count_over_time({ALL}[5m]))", tenant=TENANT_B)
metric("m_tenant_b_by_level", f"sum by (level) (rate({ALL}[10m]))", tenant=TENANT_B)
metric("m_scalar_mul", f"sum(rate({CHECKOUT}[5m])) * 60")
metric("m_series_div", f"sum by (level) (count_over_time({CHECKOUT}[5m])) / 2")
metric("m_series_ratio", 'sum(rate({service_name="checkout", level="error"}[5m])) / sum(rate({service_name="checkout"}[5m]))')
metric("m_cmp_filter", f"sum by (service_name) (count_over_time({ALL}[5m])) > 3")
metric("m_cmp_bool", f"sum by (service_name) (count_over_time({ALL}[5m])) > bool 3")
metric("m_vector_sum", "vector(1)+vector(1)")
metric("m_unwrap_sum", f"sum_over_time({PAY_DEBUG} | logfmt | unwrap bytes [5m])")
metric("m_unwrap_avg_by", f"avg_over_time({PAY_DEBUG} | logfmt | unwrap bytes [10m]) by (method)")
metric("m_unwrap_quantile", f"quantile_over_time(0.9, {PROD} | json | unwrap bytes [10m]) by (level)")
metric("m_unwrap_duration", f"max_over_time({PAY_DEBUG} | logfmt | unwrap duration(duration) [10m]) by (method)")
metric("m_unwrap_first_last", f"sum(last_over_time({PROD} | json | unwrap seq [10m]))")
metric("m_unwrap_stddev", f"stddev_over_time({PROD} | json | unwrap bytes [15m]) by (level)")
metric("m_offset", f"sum(count_over_time({CHECKOUT}[5m] offset 10m))")
metric("m_absent", 'absent_over_time({service_name="nope"}[5m])')
metric("m_label_replace", f'label_replace(sum by (service_name) (count_over_time({ALL}[10m])), "svc", "$1", "service_name", "(.*)")')
metric("m_rate_counter", f"sum(rate_counter({PAY_DEBUG} | logfmt | unwrap bytes [5m]))")
metric("m_count_values", f'count_values("n", sum by (service_name) (count_over_time({ALL}[10m])))')
metric("m_subquery", f"max_over_time(rate({CHECKOUT}[1m])[5m:1m])")

# ---- comparisons, set operators and vector matching -----------------------------------------------
BY_SERVICE_5M = f"sum by (service_name) (count_over_time({ALL}[5m]))"
BY_LEVEL_ENV = f"sum by (level, env) (count_over_time({CHECKOUT}[5m]))"
BY_ENV = f"sum by (env) (count_over_time({CHECKOUT}[5m]))"
metric("m_cmp_scalar_left", f"3 < {BY_SERVICE_5M}")
metric("m_cmp_vectors", f"{BY_SERVICE_5M} >= sum by (service_name) (count_over_time({ALL}[10m])) / 2")
metric("m_cmp_eq_bool", f"sum by (level) (count_over_time({CHECKOUT}[5m])) == bool 4")
metric("m_cmp_ne_le", f"{BY_SERVICE_5M} != 4 <= 8")
metric("m_cmp_scalars", "1 < 2")
metric("m_div_zero", f"sum(count_over_time({CHECKOUT}[5m])) / 0")
metric("m_and", f'{BY_SERVICE_5M} and sum by (service_name) (count_over_time({ALL} |= "error" [5m]))')
metric("m_or", f'sum by (level) (count_over_time({CHECKOUT} |= "cache" [5m])) or sum by (level) (count_over_time({CHECKOUT}[5m]))')
metric("m_unless_on", f"sum by (service_name, env) (count_over_time({ALL}[5m])) unless on (env) sum by (env) (count_over_time({STAGING}[5m]))")
metric("m_group_left", f"{BY_LEVEL_ENV} / on (env) group_left {BY_ENV}")
metric("m_group_right", f"sum by (env) (count_over_time({CHECKOUT} |= \"slow\" [10m])) - on (env) group_right {BY_LEVEL_ENV}")
metric("m_group_left_include", f"{BY_LEVEL_ENV} / on (env) group_left (service_name) sum by (env, service_name) (count_over_time({CHECKOUT}[5m]))")
metric("m_group_unique_refused", f"sum by (env, level) (count_over_time({CHECKOUT} |= \"slow\" [10m])) - on (env) group_right (level) {BY_LEVEL_ENV}")
metric("m_ignoring_group_left", f"{BY_LEVEL_ENV} * ignoring (level) group_left {BY_ENV}")
metric("m_on_one_to_one", f"{BY_ENV} + on (env) sum by (env, service_name) (count_over_time({CHECKOUT}[5m]))")
metric("m_many_to_one_refused", f"sum by (level) (count_over_time({CHECKOUT}[5m])) + on () sum(count_over_time({CHECKOUT}[5m]))")
metric("m_set_literal_refused", "vector(1) or 2")

# ---- bottomk, sort, offset, absent_over_time, label_replace -------------------------------------
instant("i_bottomk", f"bottomk(2, sum by (service_name) (count_over_time({ALL}[1h])))", 0)
instant("i_sort", f"sort(sum by (service_name) (count_over_time({ALL}[1h])))", 0)
instant("i_bottomk_by", f"bottomk(1, sum by (env, level) (count_over_time({CHECKOUT}[1h]))) by (env)", 0)
metric("m_offset_steps", f"sum by (level) (rate({CHECKOUT}[2m] offset 90s))", step="30s", start=Rel(-1800))
instant("i_offset", f"sum(count_over_time({CHECKOUT}[15m] offset 15m))", 0)
metric("m_offset_unwrap", f"sum_over_time({PAY_DEBUG} | logfmt | unwrap bytes [5m] offset 5m)")
metric("m_absent_some_steps", f'absent_over_time({CHECKOUT} |= "slow" [2m])')
metric("m_absent_labels", 'absent_over_time({service_name="nope", env=~"x", level="a", level="b"}[5m])')
metric("m_label_replace_some", f'label_replace(sum by (level) (count_over_time({CHECKOUT}[10m])), "lvl", "x-$1", "level", "e(.*)")')
metric("m_label_replace_delete", f'label_replace({BY_LEVEL_ENV}, "env", "", "level", "info")')

# ---- unwrap --------------------------------------------------------------------------------------
metric("m_unwrap_min_by", f"min_over_time({PAY_DEBUG} | logfmt | unwrap bytes [10m]) by (method)")
# Lines of several streams at one instant (the minute boundaries) in one group: Loki takes them
# in the order of their streams' hashes.
metric("m_last_tie_by", f"last_over_time({PROD} | json | unwrap seq [10m]) by (method)")
metric("m_last_tie_all", 'last_over_time({service_name=~"checkout|cron|search|proxy"} | regexp "(?P<n>[0-9]+)" | unwrap n [1m]) by ()')
metric("m_first_tie_all", 'first_over_time({service_name=~"checkout|cron|search|proxy"} | regexp "(?P<n>[0-9]+)" | unwrap n [61s]) by ()')
metric("m_unwrap_first_by", f"first_over_time({PROD} | json | unwrap seq [10m]) by (level)")
metric("m_unwrap_stdvar", f"stdvar_over_time({PROD} | json | unwrap bytes [15m]) by (level)")
metric("m_unwrap_rate", f"rate({PAY_DEBUG} | logfmt | unwrap bytes [5m])")
metric("m_mod", f"sum by (level) (count_over_time({CHECKOUT}[5m])) % 3")
metric("m_pow", f"sum(count_over_time({PROXY}[5m])) ^ 0.5 * 2")
metric("m_pow_right_assoc", f"2 ^ 3 ^ 2 * sum(count_over_time({PROXY}[5m])) % 7")
metric("m_mod_on", f"sum by (level) (count_over_time({CHECKOUT}[5m])) % on (level) sum by (level) (count_over_time({CHECKOUT}[10m]))")
metric("m_mod_zero", f"sum(count_over_time({PROXY}[5m])) % 0")
metric("m_unwrap_sum_rate_by", f"sum by (method) (rate({PAY_DEBUG} | logfmt | unwrap bytes [5m]))")
metric("m_unwrap_quantile_0", f"quantile_over_time(0, {PROD} | json | unwrap bytes [10m]) by (level)")
metric("m_unwrap_quantile_1", f"quantile_over_time(1, {PROD} | json | unwrap bytes [10m]) by (level)")
metric("m_unwrap_bytes_conv", f"sum_over_time({PAY_DEBUG} | logfmt | unwrap bytes(size) [10m])")
metric("m_unwrap_duration_seconds", f"avg_over_time({PAY_DEBUG} | logfmt | unwrap duration_seconds(duration) [10m]) by (status)")
metric("m_unwrap_not_a_number", f'sum_over_time({PAY_DEBUG} | logfmt | ts="t24" | unwrap path [5m])')
metric("m_unwrap_not_a_number_by", f'max_over_time({PAY_DEBUG} | logfmt | ts="t24" | unwrap path [5m]) by (method)')
metric("m_unwrap_error_dropped", f'sum_over_time({PAY_DEBUG} | logfmt | unwrap path | __error__="" [5m])')
metric("m_unwrap_missing_label", f"sum_over_time({PAYMENTS} | json | unwrap bytes [5m])")
metric("m_unwrap_post_filter", f"sum_over_time({PROD} | json | unwrap bytes | bytes > 80000 [5m])")
metric("m_unwrap_avg_by_filtered", f"avg_over_time({PROD} | json | unwrap bytes | bytes > 80000 [10m]) by (level)")
metric("m_rate_counter_series", f"rate_counter({PROD} | json | unwrap seq [10m])")
instant("i_unwrap_quantile", f"quantile_over_time(0.5, {PROD} | json | unwrap duration(duration) [1h]) by (method)", 0)
metric("m_unwrap_without_refused", f"sum_over_time({PAY_DEBUG}[5m])")
metric("m_unwrap_grouping_refused", f"sum_over_time({PAY_DEBUG} | logfmt | unwrap bytes [5m]) by (method)")

# ---- parser hints: a query that keeps some labels extracts only those it reads ---------------------
metric("m_hint_json_unwrap_error_by", f"max_over_time({PROD} | json | unwrap path [5m]) by (level)")
metric("m_hint_logfmt_unwrap_error_sum_by", f"sum by (status) (sum_over_time({PAY_DEBUG} | logfmt | unwrap path [5m]))")
metric("m_hint_extracted", f"sum by (level_extracted) (count_over_time({PAY_DEBUG} | logfmt [10m]))")
metric("m_hint_json_nested", f"sum by (user_name) (count_over_time({PROD} | json [10m]))")
metric("m_hint_filter", f"sum by (method) (count_over_time({PAY_DEBUG} | logfmt | status >= 500 [10m]))")
metric("m_hint_json_error_by", f"sum by (status) (count_over_time({PAYMENTS} | json [10m]))")

# ---- instant metric queries --------------------------------------------------------------------
instant("i_count_by_service", f"sum by (service_name) (count_over_time({ALL}[10m]))", -600)
instant("i_rate", f"rate({CHECKOUT}[5m])", -1200)
instant("i_topk_hour", f"topk(3, sum by (service_name) (count_over_time({ALL}[1h])))", 0)
instant("i_on_boundary", f"sum(count_over_time({CHECKOUT}[15m]))", -HOUR + 30 * 60)
instant("i_on_boundary_end", f"sum(count_over_time({CHECKOUT}[15m]))", -HOUR + 15 * 60)
instant("i_bytes", f"sum(bytes_over_time({SEARCH}[30m]))", -300)
instant("i_vector_sum", "vector(1)+vector(1)", 0)
instant("i_scalar", "1+1", 0)
instant("i_sort_desc", f"sort_desc(sum by (service_name) (count_over_time({ALL}[1h])))", 0)
instant("i_json_by_path", f"sum by (path) (count_over_time({PROD} | json [1h]))", 0)
instant("i_tenant_b", f"sum by (level) (count_over_time({ALL}[1h]))", 0, tenant=TENANT_B)
instant("i_count_streams", f"count_over_time({SEARCH}[1h])", 0)
instant("i_min_by_level", f"min by (level) (count_over_time({ALL}[30m]))", -900)
instant("i_unwrap_sum", f"sum by (method) (sum_over_time({PAY_DEBUG} | logfmt | unwrap bytes [1h]))", 0)
instant("i_no_data", 'sum(count_over_time({service_name="nope"}[5m]))', 0)
instant("i_before_data", f"sum(count_over_time({CHECKOUT}[5m]))", -2 * HOUR)

# ---- errors ------------------------------------------------------------------------------------
logs("err_parse", '{service_name="checkout"')
logs("err_empty_matcher", '{service_name=~".*"}')
logs("err_bad_regex", '{service_name=~"("}')
metric("err_step_too_small", f"sum(count_over_time({CHECKOUT}[5m]))", step="0.1s")
metric("err_range_unknown_function", f"sum(foo_over_time({CHECKOUT}[5m]))")
add("err_missing_query", "query_range", [("start", START), ("end", END)])
add("err_end_before_start", "query_range", [("query", CHECKOUT), ("start", END), ("end", START)])

# ---- labels, label values, series --------------------------------------------------------------
add("labels", "labels", [("start", START), ("end", END)], norm="data")
add("labels_tenant_b", "labels", [("start", START), ("end", END)], norm="data", tenant=TENANT_B)
add("labels_window", "labels", [("start", Rel(-HOUR)), ("end", Rel(-HOUR + 60))], norm="data")
add("labels_query", "labels", [("start", START), ("end", END), ("query", SEARCH)], norm="data")
for name in ("service_name", "level", "env", "job", "app", "trace_id", "detected_level", "host", "nope"):
    add(f"label_values_{name}", f"label/{name}/values", [("start", START), ("end", END)], norm="data")
add("label_values_service_b", "label/service_name/values", [("start", START), ("end", END)],
    norm="data", tenant=TENANT_B)
add("label_values_level_query", "label/level/values",
    [("start", START), ("end", END), ("query", CHECKOUT)], norm="data")
add("label_values_env_query", "label/env/values",
    [("start", START), ("end", END), ("query", '{service_name="checkout", level="warn"}')], norm="data")
add("series_checkout", "series", [("match[]", CHECKOUT), ("start", START), ("end", END)], norm="data")
add("series_two", "series", [("match[]", PAYMENTS), ("match[]", '{job="cron"}'),
                             ("start", START), ("end", END)], norm="data")
add("series_all", "series", [("match[]", ALL), ("start", START), ("end", END)], norm="data")
add("series_env", "series", [("match[]", '{env="prod"}'), ("start", START), ("end", END)], norm="data")
add("series_tenant_b", "series", [("match[]", ALL), ("start", START), ("end", END)], norm="data",
    tenant=TENANT_B)
add("series_window", "series", [("match[]", ALL), ("start", Rel(-HOUR)), ("end", Rel(-HOUR + 60))],
    norm="data")

# ---- index stats and volume --------------------------------------------------------------------
for check_id, query, start, end, tenant in (
        ("stats_checkout", CHECKOUT, START, END, TENANT_A),
        ("stats_all", ALL, START, END, TENANT_A),
        ("stats_job", '{job="cron"}', START, END, TENANT_A),
        ("stats_level", '{service_name="checkout", level="error"}', START, END, TENANT_A),
        ("stats_window", ALL, Rel(-1800), Rel(-1200), TENANT_A),
        ("stats_tenant_b", ALL, START, END, TENANT_B)):
    add(check_id, "index/stats", [("query", query), ("start", start), ("end", end)], norm="body", tenant=tenant)

add("volume_all", "index/volume", [("query", ALL), ("start", START), ("end", END)])
add("volume_by_level", "index/volume", [("query", ALL), ("start", START), ("end", END),
                                        ("targetLabels", "level")])
add("volume_limit", "index/volume", [("query", ALL), ("start", START), ("end", END), ("limit", "2")])
add("volume_checkout", "index/volume", [("query", CHECKOUT), ("start", START), ("end", END)])
add("volume_tenant_b", "index/volume", [("query", ALL), ("start", START), ("end", END)], tenant=TENANT_B)
add("volume_range", "index/volume_range", [("query", ALL), ("start", START), ("end", END), ("step", "600s")])
add("volume_range_level", "index/volume_range", [("query", CHECKOUT), ("start", START), ("end", END),
                                                 ("step", "900s"), ("targetLabels", "level")])
add("volume_aggregate_labels", "index/volume", [("query", CHECKOUT), ("start", START), ("end", END),
                                                ("aggregateBy", "labels")])

# ---- Grafana's helpers: detected labels and fields, format_query, patterns ---------------------
add("detected_labels_all", "detected_labels", [("query", ALL), ("start", START), ("end", END)], norm="body")
add("detected_labels_checkout", "detected_labels", [("query", CHECKOUT), ("start", START), ("end", END)],
    norm="body")
add("detected_fields_checkout", "detected_fields", [("query", PROD), ("start", START), ("end", END)],
    norm="body")
add("detected_fields_payments", "detected_fields", [("query", PAY_DEBUG), ("start", START), ("end", END)],
    norm="body")
add("detected_field_values", "detected_field/method/values",
    [("query", PAY_DEBUG), ("start", START), ("end", END)], norm="body")
add("format_query_log", "format_query", [("query", '{service_name="checkout",level=~"warn|error"}|="x"|json')],
    norm="data")
add("format_query_metric", "format_query",
    [("query", 'sum by(level)(count_over_time({service_name="checkout"}|json|status>=500[5m]))')], norm="data")
add("format_query_unwrap", "format_query",
    [("query", 'max_over_time({a="b"} | unwrap duration_seconds(d) | x > 1 [1m] offset 90s) by (m)')], norm="data")
add("format_query_binary", "format_query",
    [("query", 'rate({a="b"}[1m]) > bool on (x) group_left (z) rate({c="d"}[1m]) or vector(1) unless bottomk(2, rate({e="f"}[1m]))')],
    norm="data")
add("format_query_label_replace", "format_query",
    [("query", 'sort_desc(label_replace(rate({a="b"}[1m]), "dst", "$1-x", "src", "(.*)"))')], norm="data")
add("patterns_proxy", "patterns", [("query", PROXY), ("start", START), ("end", END)], norm="data")

# ---- live tail (run last: the live check pushes one more line) ---------------------------------
add("tail_history", "tail", [("query", '{service_name="checkout", level="error"}'), ("start", START),
                             ("limit", "1000")], norm="tail")
add("tail_history_filtered", "tail", [("query", PROXY + ' |= "GET"'), ("start", START), ("limit", "1000")],
    norm="tail")
add("tail_history_limit", "tail", [("query", SEARCH), ("start", START), ("limit", "5")], norm="tail")
add("tail_live", "tail", [("query", '{service_name="tailed"}'), ("start", Rel(-HOUR)), ("limit", "10")],
    norm="tail", live=True)
