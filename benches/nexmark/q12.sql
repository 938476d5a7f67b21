-- Nexmark q12: bids per bidder per window (event-time tumbling, as Feldera runs it)
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q12 AS
  SELECT bidder, COUNT(*) AS bid_count, window_start, window_end
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
  GROUP BY bidder, window_start, window_end;
