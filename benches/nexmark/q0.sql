-- Nexmark q0: pass-through, the cost floor (every bid, per 10 s window)
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q0 AS
  SELECT window_start, window_end, auction, bidder, price, date_time, extra
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND);
