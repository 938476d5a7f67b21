-- Nexmark q18: each bidder's last bid on each auction, per 10 s window
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q18 AS
  SELECT window_start, window_end, auction, bidder, price, channel, date_time FROM (
    SELECT auction, bidder, price, channel, date_time,
      ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY date_time DESC, price DESC, channel) AS rank_number
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)) AS b
  WHERE rank_number <= 1;
