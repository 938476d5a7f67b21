-- Nexmark q19: the 10 highest bids of each auction, per 10 s window
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q19 AS
  SELECT window_start, window_end, auction, bidder, price, date_time, rank_number FROM (
    SELECT auction, bidder, price, date_time,
      ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC, date_time, bidder) AS rank_number
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)) AS b
  WHERE rank_number <= 10;
