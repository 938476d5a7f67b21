-- Nexmark q11: user sessions, bids per bidder session (gap 10 s)
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q11 AS
  SELECT bidder, COUNT(*) AS bid_count, window_start, window_end
  FROM SESSION(bid, date_time, INTERVAL '10' SECOND)
  GROUP BY bidder, window_start, window_end;
