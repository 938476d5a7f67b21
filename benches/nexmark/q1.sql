-- Nexmark q1: currency conversion (dollars to euros)
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q1 AS
  SELECT window_start, window_end, auction, bidder, 0.908 * price AS price, date_time, extra
  FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND);
