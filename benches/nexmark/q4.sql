-- Nexmark q4: average closing price per category (auctions joined with their bids, per 10 s window)
CREATE SOURCE auction (id BIGINT, item_name VARCHAR, description VARCHAR, initial_bid BIGINT,
                        reserve BIGINT, date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT,
                        category BIGINT, extra VARCHAR,
                        WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                    date_time TIMESTAMP, extra VARCHAR,
                    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND);
CREATE VIEW q4 AS
  SELECT window_start, window_end, q.category, AVG(q.final) AS avg_price FROM (
    SELECT MAX(b.price) AS final, a.category
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND) AS a
    JOIN TUMBLE(bid, date_time, INTERVAL '10' SECOND) AS b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category) AS q
  GROUP BY q.category;
