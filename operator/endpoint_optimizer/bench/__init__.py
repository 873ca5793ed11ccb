"""Load generator over InvokeEndpointWithResponseStream: TTFT, ITL, throughput."""
